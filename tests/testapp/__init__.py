"""A small Django app for the integration tests: a model with a fence column and locked views."""
