// What the paywall browser checks share: an injected EIP-1193 wallet (EIP-6963 announced) backed by viem
// accounts on the test chain, a page opener that records console errors, and the page's status line.
import { createPublicClient, createWalletClient, http } from "viem";

export const TIMEOUT = 20_000;

/// The uint members of `primaryType` in `types`, converted to BigInt (viem signs numbers, the page sends
/// decimal strings), nested structs included.
function typedMessage(types, primaryType, message) {
  const out = {};
  for (const field of types[primaryType]) {
    const v = message[field.name];
    if (types[field.type]) out[field.name] = typedMessage(types, field.type, v);
    else if (/^u?int\d*$/.test(field.type)) out[field.name] = BigInt(v);
    else out[field.name] = v;
  }
  return out;
}

/// The wallet, on the Node side: answers the page's EIP-1193 requests for `accountOf(mode)`, signing with
/// `signerOf(mode)`, on the chain at `rpcUrl`. `mode`: "reject" refuses to sign, "elsewhere" sits on a chain
/// it cannot leave; every signature is counted in `out.signed`, every type signed in `out.signedTypes`.
export function wallet({ rpcUrl, accountOf, signerOf, out }) {
  const chain = createPublicClient({ transport: http(rpcUrl) });
  return (mode) => {
    const me = accountOf(mode);
    return async (method, params) => {
      try {
        switch (method) {
          case "eth_requestAccounts":
          case "eth_accounts":
            return { result: [me.address] };
          case "eth_chainId":
            return { result: mode === "elsewhere" ? "0x1" : `0x${(await chain.getChainId()).toString(16)}` };
          case "wallet_switchEthereumChain":
            if (mode === "elsewhere") return { error: { code: 4902, message: "Unrecognized chain ID." } };
            return { result: null };
          case "eth_call":
          case "eth_getTransactionReceipt":
            return { result: await chain.request({ method, params }) };
          case "eth_sendTransaction": {
            const [tx] = params;
            const client = createWalletClient({ account: me, transport: http(rpcUrl) });
            out.sentTransactions = (out.sentTransactions ?? 0) + 1;
            const chainId = await chain.getChainId();
            return { result: await client.sendTransaction({ to: tx.to, data: tx.data, chain: { id: chainId, name: "test", nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 }, rpcUrls: { default: { http: [rpcUrl] } } } }) };
          }
          case "eth_signTypedData_v4": {
            if (mode === "reject") return { error: { code: 4001, message: "User rejected the request." } };
            const typed = JSON.parse(params[1]);
            const { EIP712Domain, ...types } = typed.types;
            const message = typedMessage(types, typed.primaryType, typed.message);
            const signature = await signerOf(mode).signTypedData({ domain: typed.domain, types, primaryType: typed.primaryType, message });
            if (mode !== "badsig") out.signed = (out.signed ?? 0) + 1;
            (out.signedTypes ??= []).push(typed.primaryType);
            return { result: signature };
          }
          default:
            return { error: { code: 4200, message: `unsupported method ${method}` } };
        }
      } catch (e) {
        return { error: { code: -32603, message: String(e?.message ?? e) } };
      }
    };
  };
}

// The page side: window.ethereum and an EIP-6963 announcement, forwarding to the exposed function.
function inject() {
  const provider = {
    isTestWallet: true,
    async request({ method, params }) {
      const r = await window.__x402Wallet(method, params ?? []);
      if (r.error) {
        const e = new Error(r.error.message);
        e.code = r.error.code;
        throw e;
      }
      return r.result;
    },
    on() {},
    removeListener() {},
  };
  window.ethereum = provider;
  const announce = () =>
    window.dispatchEvent(
      new CustomEvent("eip6963:announceProvider", {
        detail: Object.freeze({ info: { uuid: "00000000-0000-4000-8000-000000000000", name: "Test wallet", icon: "data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg'/>", rdns: "org.example.test" }, provider }),
      }),
    );
  window.addEventListener("eip6963:requestProvider", announce);
}

/// Opens `url` in a new page with the wallet of `mode` ("none": no wallet), waits for the paywall's
/// Connect button, records `out[<mode>Status]`; console errors other than the 402 itself (and what
/// `expected(mode, text)` allows) go to `out.consoleErrors`.
export async function open(browser, { url, mode, walletFor, out, expected = () => false }) {
  const page = await browser.newPage();
  page.on("console", (m) => {
    // The paywall document itself answers 402 by design: Chromium logs that as a failed load. Anything else
    // (another failed resource, a script error, a CSP violation) is an error.
    const own = m.location()?.url === url && (/status of 402/.test(m.text()) || expected(mode, m.text()));
    if (m.type() === "error" && !own) out.consoleErrors.push(`${mode}: ${m.text()} (${m.location()?.url})`);
  });
  page.on("pageerror", (e) => out.consoleErrors.push(`${mode}: ${e.message}`));
  if (mode !== "none") {
    await page.exposeFunction("__x402Wallet", walletFor(mode));
    await page.evaluateOnNewDocument(inject);
  }
  await page.setViewport({ width: 1000, height: 900 });
  const res = await page.goto(url, { waitUntil: "load" });
  out[`${mode}Status`] = res.status();
  await page.waitForSelector("#x402-connect:not([disabled])", { timeout: TIMEOUT });
  return page;
}

/// The paywall's status line.
export async function status(page) {
  return page.$eval("#x402-status", (e) => e.textContent.trim());
}
