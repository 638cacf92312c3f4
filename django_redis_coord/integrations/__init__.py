"""The library in other frameworks' hands: Celery, Django's tasks framework, cache fills, fenced ORM writes."""
