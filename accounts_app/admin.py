from django.contrib import admin

from accounts_app.views import AdminSignInForm

# The admin's sign-in page says when an attempt was refused by the limits
# (accounts_app/limits.py); its route is accounts_app/urls.py's, which answers 429.
admin.site.login_form = AdminSignInForm
