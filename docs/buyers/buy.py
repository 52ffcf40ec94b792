"""Buy one article with the official x402 client for Python.

    pip install "x402[evm,httpx]"
    PAYER_KEY=0x<private key> python buy.py [article URL]
"""

import asyncio
import os
import re
import sys

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http.clients import x402AsyncTransport
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSigner

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/x402Article?articleId=c2pa-explained"
KEY = os.environ.get("PAYER_KEY", "")
if not re.fullmatch(r"0x[0-9a-fA-F]{64}", KEY):
    print("Set PAYER_KEY to the buyer's private key (0x and 64 hex digits).", file=sys.stderr)
    sys.exit(2)


async def main() -> None:
    client = x402Client()
    register_exact_evm_client(client, EthAccountSigner(Account.from_key(KEY)))
    async with httpx.AsyncClient(transport=x402AsyncTransport(client), timeout=60) as http:
        res = await http.get(URL)
    if res.status_code != 200:
        sys.exit(f"HTTP {res.status_code}: {res.text}")
    body = res.json()
    print(f"{body['article']['title']}, by {body['article']['author_name']}")
    print(f"receipt {body['receipt']['nft']['tokenId']}: {body['receipt']['nft']['verifyUrl']}")


asyncio.run(main())
