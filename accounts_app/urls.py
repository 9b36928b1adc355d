from django.contrib import admin
from django.urls import path

from accounts_app import limits, views

urlpatterns = [
    path("accounts/login/", views.sign_in, name="login"),
    path("accounts/signup/", views.sign_up, name="signup"),
    path("accounts/logout/", views.sign_out, name="logout"),
    path("accounts/confirm/", views.confirm_email, name="confirm-email"),
    path("accounts/confirm/<str:token>/", views.confirm_email_link, name="confirm-email-link"),
    # Before the admin's own routes (ticketing/urls.py): its sign-in page, limited
    # as the site's (the admin's login_form is set in accounts_app/admin.py).
    path("admin/login/", limits.sign_in_view(admin.site.login)),
]
