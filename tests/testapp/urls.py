from django.urls import path

from . import views

urlpatterns = [
    path("hold/<str:name>/", views.hold),
    path("ahold/<str:name>/", views.ahold),
    path("cbv/<str:name>/", views.HoldView.as_view()),
    path("cbv-method/<str:name>/", views.MethodHoldView.as_view()),
    path("cbv-dispatch/<str:name>/", views.MethodDecoratorView.as_view()),
    path("acbv/<str:name>/", views.AsyncHoldView.as_view()),
    path("stream/<str:name>/", views.stream),
    path("astream/<str:name>/", views.astream),
    path("boom/<str:name>/", views.boom),
    path("aboom/<str:name>/", views.aboom),
    path("limited/<str:name>/", views.limited),
    path("alimited/<str:name>/", views.alimited),
    path("wait/<str:name>/", views.waiting),
    path("await/<str:name>/", views.await_turn),
    path("user/", views.per_user),
    path("auser/", views.aper_user),
    path("query/", views.by_query),
    path("header/", views.by_header),
    path("two-headers/", views.by_two_headers),
    path("callable-header/", views.by_callable_header),
    path("default/", views.default_key),
    path("callable/<str:name>/", views.by_callable),
    path("rollback/<str:name>/", views.rollback),
    path("renewed/<str:name>/", views.renewed),
    path("fenced/<str:name>/", views.fenced),
    path("avail/<str:name>/", views.availability),
    path("rendered/<str:name>/", views.rendered),
    path("aavail/<str:name>/", views.aavailability),
]
