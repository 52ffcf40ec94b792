// A reader pays for an article priced in a token without EIP-3009 from the paywall, in headless Chromium with
// the injected test wallet: the page signs `exact` over Permit2.
//
//     node browser-permit2.mjs <sponsored article URL> <approval article URL> <RPC URL> <payer key> <chromium> <screenshot dir>
//
// The first server settles on chain and declares `eip2612GasSponsoring`: the wallet, which never allowed
// Permit2, signs an EIP-2612 permit and the Permit2 permit, and sends no transaction. The second declares no
// sponsoring: the wallet sends one approval transaction, then signs. Prints one JSON line with the observations;
// exits 1 on a failure (printed on stderr).
import puppeteer from "puppeteer-core";
import { privateKeyToAccount } from "viem/accounts";
import { TIMEOUT, open, status, wallet } from "./browser-wallet.mjs";

const [sponsoredUrl, approvalUrl, rpcUrl, key, chromium, shots] = process.argv.slice(2);
if (!sponsoredUrl || !approvalUrl || !rpcUrl || !key || !chromium || !shots) {
  console.error("usage: node browser-permit2.mjs <sponsored article URL> <approval article URL> <RPC URL> <payer key> <chromium> <screenshot dir>");
  process.exit(2);
}
const account = privateKeyToAccount(key);
const out = { consoleErrors: [] };
const walletFor = wallet({ rpcUrl, accountOf: () => account, signerOf: () => account, out });

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  for (const [mode, url] of [["sponsored", sponsoredUrl], ["approval", approvalUrl]]) {
    const page = await open(browser, { url, mode, walletFor, out });
    await page.click("#x402-connect");
    await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
    await page.waitForFunction(() => /Ready to pay/.test(document.querySelector("#x402-status").textContent), { timeout: TIMEOUT });
    out[`${mode}Ready`] = await status(page);
    await page.screenshot({ path: `${shots}/paywall-permit2-${mode}.png`, fullPage: true });
    out.signedTypes = [];
    await page.click("#x402-pay");
    await page.waitForSelector(".receipt a", { timeout: 60_000 });
    out[`${mode}Signed`] = out.signedTypes;
    out[`${mode}Receipt`] = await page.$eval(".receipt", (e) => e.textContent);
    out[`${mode}Transactions`] = out.sentTransactions ?? 0;
    await page.screenshot({ path: `${shots}/paywall-permit2-${mode}-paid.png`, fullPage: true });
    await page.close();
  }
  console.log(JSON.stringify(out));
} catch (error) {
  console.error(`browser-permit2: ${error?.stack ?? error}\n${JSON.stringify(out)}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
