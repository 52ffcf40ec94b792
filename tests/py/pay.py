"""Buys a resource with the official Python x402 client (PyPI ``x402[evm,httpx]``).

    python pay.py <url> <private key>

Prints one JSON line: {status, body, receipt, receiptHeader, paymentHeader}; ``receipt`` is the decoded
PAYMENT-RESPONSE (or X-PAYMENT-RESPONSE) header. Exits 0 whenever an HTTP answer came back, 1 on a client error.
"""

import asyncio
import base64
import json
import sys

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http.clients import x402AsyncTransport
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSigner


class RecordingTransport(httpx.AsyncHTTPTransport):
    """Remembers the payment header the client sent, so a test can replay it."""

    sent = None

    async def handle_async_request(self, request):
        header = request.headers.get("PAYMENT-SIGNATURE") or request.headers.get("X-PAYMENT")
        if header:
            RecordingTransport.sent = header
        return await super().handle_async_request(request)


async def main(url: str, key: str) -> None:
    client = x402Client()
    register_exact_evm_client(client, EthAccountSigner(Account.from_key(key)))
    # The test token lives on a local chain the client does not know: allow it.
    client.set_spend_controls({"allowed_assets": True})
    transport = x402AsyncTransport(client, transport=RecordingTransport())
    async with httpx.AsyncClient(transport=transport, timeout=60) as http:
        response = await http.get(url)
    header = response.headers.get("PAYMENT-RESPONSE") or response.headers.get("X-PAYMENT-RESPONSE")
    receipt = json.loads(base64.b64decode(header)) if header else None
    print(
        json.dumps(
            {
                "status": response.status_code,
                "body": response.text,
                "receipt": receipt,
                "receiptHeader": header,
                "paymentHeader": RecordingTransport.sent,
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python pay.py <url> <private key>", file=sys.stderr)
        sys.exit(2)
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    except Exception as error:  # noqa: BLE001 - any client failure is reported, loudly
        print(f"pay.py: {error!r}", file=sys.stderr)
        sys.exit(1)
