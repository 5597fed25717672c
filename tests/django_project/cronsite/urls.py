"""The project's URLs: the admin, and the cron dashboard behind its login."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("cron/", include("dramatiq_cron_middleware.web.django")),
]
