FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt
COPY . .
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput -v 0 \
    && useradd --system --uid 1000 app && mkdir -p var && chown -R app var
USER app
EXPOSE 8000
CMD ["gunicorn", "ticketing.asgi:application", "--config", "python:ticketing.gunicorn_conf"]
