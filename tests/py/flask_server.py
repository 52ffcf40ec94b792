"""An official x402 resource server in Python (the `x402` package's Flask middleware) that sells GET /weather
through a remote facilitator.

    python flask_server.py <facilitator url> <network> <asset> <eip712 name> <eip712 version> <payTo> <amount>

Listens on a free loopback port and prints one JSON line {"url": "http://127.0.0.1:<port>/weather"} once ready.
With X402_FACILITATOR_TOKEN set, every facilitator call carries `Authorization: Bearer <token>`.
"""

import json
import logging
import os
import sys

from flask import Flask, jsonify
from werkzeug.serving import make_server
from x402 import x402ResourceServerSync
from x402.http import HTTPFacilitatorClientSync
from x402.http.middleware.flask import PaymentMiddleware
from x402.mechanisms.evm.exact.server import ExactEvmScheme


def main() -> None:
    if len(sys.argv) != 8:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    facilitator, network, asset, name, version, pay_to, amount = sys.argv[1:]
    config = {"url": facilitator}
    token = os.environ.get("X402_FACILITATOR_TOKEN")
    if token:
        auth = {"Authorization": f"Bearer {token}"}
        config["create_headers"] = lambda: {"verify": auth, "settle": auth, "supported": auth}
    server = x402ResourceServerSync(HTTPFacilitatorClientSync(config)).register(network, ExactEvmScheme())

    app = Flask(__name__)
    routes = {
        "GET /weather": {
            "accepts": {
                "scheme": "exact",
                "price": {"amount": amount, "asset": asset, "extra": {"name": name, "version": version}},
                "network": network,
                "payTo": pay_to,
                "maxTimeoutSeconds": 120,
            },
            "description": "weather report",
            "mimeType": "application/json",
        }
    }
    PaymentMiddleware(app, routes, server)

    @app.get("/weather")
    def weather():
        return jsonify({"report": {"weather": "sunny", "temperature": 21}})

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log on the test output
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    print(json.dumps({"url": f"http://127.0.0.1:{httpd.server_port}/weather"}), flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
