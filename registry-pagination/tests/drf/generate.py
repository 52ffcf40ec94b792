"""Generates DRF reference vectors for registry-pagination's conformance test.

Runs the real DRF `LimitOffsetPagination` (through Django's RequestFactory, host `testserver`) over the
numbers 1..count and records the exact JSON body DRF renders. Regenerate with:

    pip install --target /tmp/drfenv djangorestframework django
    PYTHONPATH=/tmp/drfenv python3 registry-pagination/tests/drf/generate.py > registry-pagination/tests/drf/vectors.json
"""

import json
import random

import django
from django.conf import settings

settings.configure(ALLOWED_HOSTS=["*"], DEBUG=False, ROOT_URLCONF=[], INSTALLED_APPS=[])
django.setup()

import rest_framework  # noqa: E402
from django.test import RequestFactory  # noqa: E402
from rest_framework.pagination import LimitOffsetPagination  # noqa: E402
from rest_framework.renderers import JSONRenderer  # noqa: E402
from rest_framework.request import Request  # noqa: E402

U64_MAX = 2**64 - 1


def render(path, query, count, default, maximum):
    paginator = LimitOffsetPagination()
    paginator.default_limit = default
    paginator.max_limit = maximum
    url = path + ("?" + query if query is not None else "")
    request = Request(RequestFactory().get(url))
    page = paginator.paginate_queryset(list(range(1, count + 1)), request)
    body = JSONRenderer().render(paginator.get_paginated_response(page).data)
    return body.decode("utf-8"), paginator.limit, paginator.offset


def fixed_cases():
    api = "/api/v3/assets/"
    for query in [None, "limit=200&offset=1000", "offset=200", "offset=1200", "offset=1234", "offset=5000",
                  "limit=abc", "limit=-1", "limit=0", "limit=500", "limit=5&offset=3", "offset=-5",
                  "format=json&limit=2&offset=4",
                  "zeta=1&limit=5&offset=10&alpha=x%20y&tag=b&tag=a&empty="]:
        yield api, query, 1234, 200, 200
    for query in ["limit=5", "limit=5&offset=1", "limit=5&offset=95", "limit=11235&offset=50",
                  "limit=invalid", "limit=0", "offset=10", None]:
        yield "/", query, 100, 10, 15
    yield api, None, 0, 200, 200
    yield api, "offset=10", 0, 200, 200


KEYS = ["a", "b", "Z", "_", "tag", "format", "k%20ey", "k+ey", "caf%C3%A9", "%C3%A9", "~x", "q/", "",
        "limit", "offset", "x%2By", "%FF", "%zz", "*", "a;b", "\u00e9".encode().hex()]
VALUES = ["", "1", "x+y", "x%20y", "a/b*c", "%2B", "%26%3D", "caf%C3%A9", "%e2%82%ac", "%FF", "%zz", "%4",
          "~-._", "%22q%22", "'", "(x)", "!$,:@", "a=b", "%00", "%0A"]
NUMBERS = ["5", "1", "0", "-1", "-0", "abc", "", "1.5", "%205", "+5", "%2B5", "005", "5%20", "%095%0A",
           "1_0", "_1", "1__0", "3", "7", "20", "199", "200", "201", "500", "1e3", "0x10", "%D9%A3",
           "%EF%BC%97", "18446744073709551000", "%2B-5", "++5", "%1C5%1F"]
PATHS = ["/api/v3/assets/", "/", "/a%7Eb/", "/caf%C3%A9/", "/x%22y/", "/(x)*!/", "/a%2Fb/", "/sp%20ace/",
         "/p;q=1/", "/%zz/"]


def random_cases(rng, n):
    for _ in range(n):
        pairs = []
        for _ in range(rng.randint(0, 5)):
            pairs.append(rng.choice(KEYS) + ("=" + rng.choice(VALUES) if rng.random() < 0.9 else ""))
        for name in ["limit", "offset"]:
            for _ in range(rng.choice([0, 1, 1, 1, 2])):
                pairs.insert(rng.randint(0, len(pairs)), name + "=" + rng.choice(NUMBERS))
        if rng.random() < 0.1:
            pairs.insert(rng.randint(0, len(pairs)), "")
        query = "&".join(pairs) if pairs or rng.random() < 0.5 else None
        count = rng.choice([0, 1, 5, 10, 37, 100, 1234])
        default = rng.choice([10, 200])
        maximum = rng.choice([15, 200, None])
        yield rng.choice(PATHS), query, count, default, maximum


def main():
    rng = random.Random(3)
    vectors = []
    for path, query, count, default, maximum in list(fixed_cases()) + list(random_cases(rng, 600)):
        body, limit, offset = render(path, query, count, default, maximum)
        if limit > U64_MAX or offset > U64_MAX:
            continue  # Python's integers are unbounded; the layer saturates at u64::MAX (tested separately).
        vectors.append({"path": path, "query": query, "count": count, "default_limit": default,
                        "max_limit": maximum, "limit": limit, "offset": offset, "body": body})
    print(json.dumps({"drf": rest_framework.__version__, "django": django.get_version(), "vectors": vectors},
                     ensure_ascii=False, indent=0))


main()
