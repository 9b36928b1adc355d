from django.urls import path

from accounts_app import views

urlpatterns = [
    path("accounts/login/", views.sign_in, name="login"),
    path("accounts/signup/", views.sign_up, name="signup"),
    path("accounts/logout/", views.sign_out, name="logout"),
]
