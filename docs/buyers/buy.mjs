// Buy one article with the official x402 client for JavaScript.
//   npm install @x402/fetch @x402/evm viem
//   PAYER_KEY=0x<private key> node buy.mjs [article URL]
import { x402Client, wrapFetchWithPayment } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const url = process.argv[2] ?? "http://127.0.0.1:8080/x402Article?articleId=c2pa-explained";
const key = process.env.PAYER_KEY;
if (!/^0x[0-9a-fA-F]{64}$/.test(key ?? "")) {
  console.error("Set PAYER_KEY to the buyer's private key (0x and 64 hex digits).");
  process.exit(2);
}

const client = new x402Client();
registerExactEvmScheme(client, { signer: privateKeyToAccount(key) });
const pay = wrapFetchWithPayment(fetch, client);

const res = await pay(url);
if (!res.ok) {
  console.error(`HTTP ${res.status}: ${await res.text()}`);
  process.exit(1);
}
const { article, receipt } = await res.json();
console.log(`${article.title}, by ${article.author_name}`);
console.log(`receipt ${receipt.nft.tokenId}: ${receipt.nft.verifyUrl}`);
