// Buys a resource with the current official x402 client (`@x402/fetch` + `@x402/evm` 2.x): `exact` (over
// EIP-3009 or Permit2, as the offer says) and `upto`.
//
//     node pay-v2.mjs <url> <private key> [rpc url]
//
// With an RPC URL the client can read the chain: when the server declares `eip2612GasSponsoring` and the
// payer's allowance for Permit2 is short, it signs an EIP-2612 permit instead (the official behaviour; without
// an RPC URL it does not, and such a payer gets 412).
//
// Prints one JSON line: {status, body, receipt, receiptHeader, paymentHeader}. `receipt` is the decoded
// PAYMENT-RESPONSE (or X-PAYMENT-RESPONSE) header, `paymentHeader` the raw payment header the client sent (so a
// test can replay it). Exits 0 whenever an HTTP answer came back; 1 on a client error (printed on stderr).
import { x402Client, wrapFetchWithPayment, decodePaymentResponseHeader } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { privateKeyToAccount } from "viem/accounts";

const [url, key, rpcUrl] = process.argv.slice(2);
const schemeOptions = rpcUrl ? { rpcUrl } : undefined;
if (!url || !key) {
  console.error("usage: node pay-v2.mjs <url> <private key>");
  process.exit(2);
}

const sent = { header: null };
const recordingFetch = async (input, init) => {
  const request = new Request(input, init);
  sent.header = request.headers.get("PAYMENT-SIGNATURE") ?? request.headers.get("X-PAYMENT") ?? sent.header;
  return fetch(request);
};

const client = new x402Client();
registerExactEvmScheme(client, { signer: privateKeyToAccount(key), schemeOptions });
// `upto` (Permit2): signs the offer's maximum; the server settles what the request used.
client.register("eip155:*", new UptoEvmScheme(privateKeyToAccount(key), schemeOptions));
// The test token lives on a local chain the client does not know: allow it (the default $1 cap still applies
// to the assets the client knows).
client.setSpendControls({ allowedAssets: true });
const fetchWithPayment = wrapFetchWithPayment(recordingFetch, client);

try {
  const response = await fetchWithPayment(url, { method: "GET" });
  const body = await response.text();
  const receiptHeader = response.headers.get("PAYMENT-RESPONSE") ?? response.headers.get("X-PAYMENT-RESPONSE");
  const receipt = receiptHeader ? decodePaymentResponseHeader(receiptHeader) : null;
  console.log(JSON.stringify({ status: response.status, body, receipt, receiptHeader, paymentHeader: sent.header }));
} catch (error) {
  console.error(`pay-v2: ${error?.stack ?? error}`);
  process.exit(1);
}
