// Checks the reference server's x402 extensions with the official code (`@x402/extensions`, `@x402/fetch`,
// `@x402/core`) and viem, independently of the workspace's Rust:
//
//     node extensions-check.mjs <server base URL> <paid article id> <unpaid article id> <private key>
//
// 1. offer-receipt: the 402's signed offer and the purchase's signed receipt verify with the official
//    verifiers and with viem's verifyTypedData against the key the server publishes (/receipts/signer), the
//    offer matches its accepts entry and the receipt matches the offer and the payer.
// 2. sign-in-with-x: the official fetch wrapper (wrapFetchWithSIWx) opens the paid article again without
//    paying; then proofs that must fail: an article the address did not pay for, a reused proof, an expired
//    one, a nonce the server never issued, another domain.
// 3. bazaar: the official facilitator client with withBazaar lists the server's articles.
//
// Prints one JSON line with every observation; the Rust test asserts on it. Exits 1 on a client error.
import { x402Client, wrapFetchWithPayment } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { decodePaymentRequiredHeader, HTTPFacilitatorClient } from "@x402/core/http";
import {
  extractOffersFromPaymentRequired,
  decodeSignedOffers,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureEIP712,
  verifyReceiptSignatureEIP712,
  extractReceiptFromResponse,
  verifyReceiptMatchesOffer,
  createOfferDomain,
  createReceiptDomain,
  OFFER_TYPES,
  RECEIPT_TYPES,
  prepareOfferForEIP712,
  prepareReceiptForEIP712,
  canonicalize,
} from "@x402/extensions/offer-receipt";
import {
  wrapFetchWithSIWx,
  createSIWxPayload,
  createSIWxMessage,
  encodeSIWxHeader,
} from "@x402/extensions/sign-in-with-x";
import { withBazaar } from "@x402/extensions/bazaar";
import { verifyTypedData } from "viem";
import { privateKeyToAccount } from "viem/accounts";

const [base, paidId, unpaidId, key] = process.argv.slice(2);
if (!base || !paidId || !unpaidId || !key) {
  console.error("usage: node extensions-check.mjs <base URL> <paid article id> <unpaid article id> <private key>");
  process.exit(2);
}
const account = privateKeyToAccount(key);
const articleUrl = (id) => `${base}/x402Article?articleId=${encodeURIComponent(id)}`;
const out = {};

async function paymentRequired(url) {
  const r = await fetch(url);
  return { status: r.status, pr: decodePaymentRequiredHeader(r.headers.get("PAYMENT-REQUIRED")) };
}

try {
  const published = (await (await fetch(`${base}/receipts/signer`)).json()).address;
  out.published = published;

  // 1. The offer.
  const { pr } = await paymentRequired(articleUrl(paidId));
  const offers = extractOffersFromPaymentRequired(pr);
  out.offers = offers.length;
  const { signer: offerSigner, payload: offerPayload } = await verifyOfferSignatureEIP712(offers[0]);
  out.offerSigner = offerSigner;
  out.offerViem = await verifyTypedData({
    address: published,
    domain: createOfferDomain(),
    types: OFFER_TYPES,
    primaryType: "Offer",
    message: prepareOfferForEIP712(offerPayload),
    signature: offers[0].signature,
  });
  const decoded = decodeSignedOffers(offers)[0];
  out.offerMatchesAccepts = findAcceptsObjectFromSignedOffer(decoded, pr.accepts) === pr.accepts[0];
  out.offerValidUntilAhead = offerPayload.validUntil > Math.floor(Date.now() / 1000);

  // 1. The purchase and its receipt.
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: account });
  client.setSpendControls({ allowedAssets: true });
  const paid = await wrapFetchWithPayment(fetch, client)(articleUrl(paidId));
  out.purchaseStatus = paid.status;
  const body = await paid.json();
  const receipt = extractReceiptFromResponse(paid);
  out.receiptInBody = canonicalize(body.receipt?.signed ?? null) === canonicalize(receipt);
  const { signer: receiptSigner, payload: receiptPayload } = await verifyReceiptSignatureEIP712(receipt);
  out.receiptSigner = receiptSigner;
  out.receiptViem = await verifyTypedData({
    address: published,
    domain: createReceiptDomain(),
    types: RECEIPT_TYPES,
    primaryType: "Receipt",
    message: prepareReceiptForEIP712(receiptPayload),
    signature: receipt.signature,
  });
  out.receiptResource = receiptPayload.resourceUrl;
  out.receiptMatchesOffer = verifyReceiptMatchesOffer(receipt, decoded, [account.address]);
  out.receiptMatchesOtherPayer = verifyReceiptMatchesOffer(receipt, decoded, ["0x000000000000000000000000000000000000dEaD"]);
  // A forged receipt (another payer) no longer recovers to the published key.
  const forged = { ...receipt, payload: { ...receipt.payload, payer: "0x000000000000000000000000000000000000dEaD" } };
  out.forgedViem = await verifyTypedData({
    address: published,
    domain: createReceiptDomain(),
    types: RECEIPT_TYPES,
    primaryType: "Receipt",
    message: prepareReceiptForEIP712(forged.payload),
    signature: forged.signature,
  });

  // 2. Sign-in-with-x with the official wrapper: read again without paying.
  const siwxFetch = wrapFetchWithSIWx(fetch, account);
  const reread = await siwxFetch(articleUrl(paidId));
  out.rereadStatus = reread.status;
  out.rereadTitle = reread.status === 200 ? (await reread.json()).article?.title : null;
  out.rereadPaid = reread.headers.has("PAYMENT-RESPONSE");
  const other = await siwxFetch(articleUrl(unpaidId));
  out.unpaidStatus = other.status;
  out.unpaidError = decodePaymentRequiredHeader(other.headers.get("PAYMENT-REQUIRED")).error;

  // 2. Proofs that must fail, built with the official payload code (and by hand where it refuses).
  async function challenge(id) {
    const { pr } = await paymentRequired(articleUrl(id));
    const ext = pr.extensions["sign-in-with-x"];
    const chain = ext.supportedChains.find((c) => c.chainId === pr.accepts[0].network);
    return { ...ext.info, chainId: chain.chainId, type: chain.type };
  }
  async function send(id, payload) {
    const r = await fetch(articleUrl(id), { headers: { "SIGN-IN-WITH-X": encodeSIWxHeader(payload) } });
    const header = r.headers.get("PAYMENT-REQUIRED");
    return { status: r.status, error: header ? decodePaymentRequiredHeader(header).error : null };
  }
  const once = await createSIWxPayload(await challenge(paidId), account, articleUrl(paidId));
  out.firstUse = await send(paidId, once);
  out.reused = await send(paidId, once);
  const past = await challenge(paidId);
  past.expirationTime = new Date(Date.now() - 60_000).toISOString();
  out.expired = await send(paidId, await createSIWxPayload(past, account, articleUrl(paidId)));
  const forgedNonce = await challenge(paidId);
  forgedNonce.nonce = forgedNonce.nonce.split("").reverse().join("");
  out.neverIssued = await send(paidId, await createSIWxPayload(forgedNonce, account, articleUrl(paidId)));
  const elsewhere = { ...(await challenge(paidId)), domain: "evil.example" };
  const message = createSIWxMessage(elsewhere, account.address);
  out.otherDomain = await send(paidId, {
    ...elsewhere,
    address: account.address,
    signature: await account.signMessage({ message }),
  });

  // 3. Discovery through the official facilitator client.
  const facilitator = withBazaar(new HTTPFacilitatorClient({ url: `${base}/facilitator` }));
  const listing = await facilitator.extensions.bazaar.listResources({ type: "http", limit: 100 });
  out.listed = listing.items.map((i) => i.resource);
  out.listedTotal = listing.pagination.total;
  out.listedAcceptsAmount = listing.items.find((i) => i.resource === articleUrl(paidId))?.accepts?.[0]?.amount;

  console.log(JSON.stringify(out));
} catch (error) {
  console.error(`extensions-check: ${error?.stack ?? error}\n${JSON.stringify(out)}`);
  process.exit(1);
}
