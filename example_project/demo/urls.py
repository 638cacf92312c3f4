from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="index"),
    path("report/<slug:name>/", views.report, name="report"),
    path("export.csv", views.export, name="export"),
    path("async/<slug:name>/", views.async_status, name="async-status"),
    path("fencing/", views.fencing, name="fencing"),
    path("hold-a-minute/", views.hold_a_minute, name="hold-a-minute"),
    path("limited/", views.limited, name="limited"),
    path("api/quote/", views.api_quote, name="api-quote"),
]
