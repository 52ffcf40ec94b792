"""The asset listing of interface B written the usual Django REST Framework way, as a peer to measure the
reference server's registry against (BENCHMARKS.md): a model holding each record, a serializer, a ListAPIView
with LimitOffsetPagination (200 per page), SQLite, served by gunicorn.

    python drf_registry.py load RECORDS.json N   # fills drf.sqlite3 with N records cycled from RECORDS.json
    gunicorn --workers 2 --bind 127.0.0.1:0 drf_registry:application

RECORDS.json is a JSON array of records (a page of the reference server's /api/v3/assets/?limit=200).
"""

import json
import os
import sys

import django
from django.conf import settings

HERE = os.path.dirname(os.path.abspath(__file__))
settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-only",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.contenttypes", "rest_framework", "drf_registry_app"],
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("DRF_DATABASE", os.path.join(HERE, "drf.sqlite3")),
        }
    },
    REST_FRAMEWORK={
        "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
        "PAGE_SIZE": 200,
        "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
        "DEFAULT_AUTHENTICATION_CLASSES": [],
        "DEFAULT_PERMISSION_CLASSES": [],
        "UNAUTHENTICATED_USER": None,
    },
    MIDDLEWARE=[],
)

# A one-file app: the model lives in a module Django can import by name.
import types  # noqa: E402

app_module = types.ModuleType("drf_registry_app")
app_module.__file__ = __file__
sys.modules["drf_registry_app"] = app_module
django.setup()

from django.db import connection, models  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework import generics, serializers  # noqa: E402


class Asset(models.Model):
    rank = models.BigIntegerField(unique=True)
    record = models.JSONField()

    class Meta:
        app_label = "drf_registry_app"
        ordering = ["rank"]


class AssetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Asset
        fields = ["record"]

    def to_representation(self, instance):
        return instance.record


class AssetList(generics.ListAPIView):
    queryset = Asset.objects.all()
    serializer_class = AssetSerializer


urlpatterns = [path("api/v3/assets/", AssetList.as_view())]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()


def load(records_path, n):
    records = json.load(open(records_path))
    with connection.schema_editor() as editor:
        editor.create_model(Asset)
    batch = []
    for i in range(n):
        record = dict(records[i % len(records)])
        record["id"] = i + 1
        batch.append(Asset(rank=i, record=record))
        if len(batch) == 2000:
            Asset.objects.bulk_create(batch)
            batch = []
    Asset.objects.bulk_create(batch)


if __name__ == "__main__" and sys.argv[1:2] == ["load"]:
    load(sys.argv[2], int(sys.argv[3]))
