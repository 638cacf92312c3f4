from django.contrib import admin

from .models import Report


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("name", "builds", "fence", "built_at")
    readonly_fields = ("fence",)
