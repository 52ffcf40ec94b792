// Buys a resource with the legacy official x402 client (`x402-fetch` 1.x + viem), x402 v1.
//
//     node pay-v1.mjs <url> <private key>
//
// Prints one JSON line: {status, body, receipt, receiptHeader, paymentHeader}; `receipt` is the decoded
// X-PAYMENT-RESPONSE header. Exits 0 whenever an HTTP answer came back; 1 on a client error.
import { wrapFetchWithPayment, decodeXPaymentResponse } from "x402-fetch";
import { createWalletClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";

const [url, key] = process.argv.slice(2);
if (!url || !key) {
  console.error("usage: node pay-v1.mjs <url> <private key>");
  process.exit(2);
}

const sent = { header: null };
const recordingFetch = async (input, init) => {
  const request = new Request(input, init);
  sent.header = request.headers.get("X-PAYMENT") ?? sent.header;
  return fetch(request);
};

// The wallet signs offline: the transport is never used for an EIP-712 signature of a local account.
const wallet = createWalletClient({ account: privateKeyToAccount(key), transport: http("http://127.0.0.1:9"), chain: baseSepolia });
const fetchWithPayment = wrapFetchWithPayment(recordingFetch, wallet);

try {
  const response = await fetchWithPayment(url, { method: "GET" });
  const body = await response.text();
  const receiptHeader = response.headers.get("X-PAYMENT-RESPONSE");
  const receipt = receiptHeader ? decodeXPaymentResponse(receiptHeader) : null;
  console.log(JSON.stringify({ status: response.status, body, receipt, receiptHeader, paymentHeader: sent.header }));
} catch (error) {
  console.error(`pay-v1: ${error?.stack ?? error}`);
  process.exit(1);
}
