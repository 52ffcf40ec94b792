// A reader pays for an article from the paywall in a real browser: headless Chromium driven by puppeteer-core,
// with an injected EIP-1193 wallet (EIP-6963 announced) backed by a viem local account on the test chain.
//
//     node browser-check.mjs <article URL> <RPC URL> <payer key> <chromium> <screenshot dir> <two-license article URL>
//
// Scenarios, in order: no wallet (the page says so); a rejected signature (the page says so, nothing is
// sent); a purchase (connect, balance shown, pay, the article and its receipt links rendered in place); the
// second license of an article sold under two (chosen on the page, paid, its license named on the receipt); a
// phone viewport. Screenshots go to <screenshot dir>. Any console error or page error fails the run. Prints one JSON
// line with the observations; exits 1 on a failure (printed on stderr).
import puppeteer from "puppeteer-core";
import { privateKeyToAccount } from "viem/accounts";
import { TIMEOUT, open as openPage, status, wallet } from "./browser-wallet.mjs";

const [articleUrl, rpcUrl, key, chromium, shots, twoLicenseUrl] = process.argv.slice(2);
if (!articleUrl || !rpcUrl || !key || !chromium || !shots || !twoLicenseUrl) {
  console.error("usage: node browser-check.mjs <article URL> <RPC URL> <payer key> <chromium> <screenshot dir> <two-license article URL>");
  process.exit(2);
}
const account = privateKeyToAccount(key);
// A key with no USDC, and a stranger whose signature the server must refuse.
const empty = privateKeyToAccount("0x" + "11".repeat(32));
const stranger = privateKeyToAccount("0x" + "22".repeat(32));
const out = { consoleErrors: [] };

const walletFor = wallet({
  rpcUrl,
  accountOf: (mode) => (mode === "poor" ? empty : account),
  signerOf: (mode) => (mode === "badsig" ? stranger : account),
  out,
});
// The answers this test cuts on purpose (the lost answer of the purchase, the refused connection).
const expected = (mode, text) =>
  (mode === "pay" && /ERR_CONNECTION_RESET/.test(text)) || (mode === "second" && /ERR_CONNECTION_REFUSED/.test(text));
const open = (browser, mode, url = articleUrl) => openPage(browser, { url, mode, walletFor, out, expected });

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  // No wallet.
  let page = await open(browser, "none");
  await page.click("#x402-connect");
  await page.waitForFunction(() => document.querySelector("#x402-status").textContent.length > 0, { timeout: TIMEOUT });
  out.noWallet = await status(page);
  await page.screenshot({ path: `${shots}/paywall-no-wallet.png`, fullPage: true });
  await page.close();

  // A rejected signature.
  page = await open(browser, "reject");
  await page.click("#x402-connect");
  await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
  await page.click("#x402-pay");
  await page.waitForFunction(() => /rejected/.test(document.querySelector("#x402-status").textContent), { timeout: TIMEOUT });
  out.rejected = await status(page);
  await page.screenshot({ path: `${shots}/paywall-rejected.png`, fullPage: true });
  await page.close();

  // The wallet is on another chain it cannot leave; a wallet without USDC; a signature the server refuses.
  page = await open(browser, "elsewhere");
  await page.click("#x402-connect");
  await page.waitForFunction(() => /Switch your wallet/.test(document.querySelector("#x402-status").textContent), { timeout: TIMEOUT });
  out.wrongChain = await status(page);
  await page.close();
  page = await open(browser, "poor");
  await page.click("#x402-connect");
  await page.waitForFunction(() => /balance is lower/.test(document.querySelector("#x402-status").textContent), { timeout: TIMEOUT });
  out.lowBalance = await status(page);
  out.lowBalancePayDisabled = await page.$eval("#x402-pay", (b) => b.disabled);
  await page.screenshot({ path: `${shots}/paywall-low-balance.png`, fullPage: true });
  await page.close();
  page = await open(browser, "badsig");
  await page.click("#x402-connect");
  await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
  await page.click("#x402-pay");
  await page.waitForFunction(() => /refused/.test(document.querySelector("#x402-status").textContent), { timeout: TIMEOUT });
  out.refused = await status(page);
  await page.close();

  // A purchase.
  page = await open(browser, "pay");
  await page.screenshot({ path: `${shots}/paywall.png`, fullPage: true });
  out.title = await page.$eval("h1", (e) => e.textContent);
  out.byline = await page.$eval(".by", (e) => e.textContent);
  out.notice = await page.$eval(".notice", (e) => e.textContent);
  out.back = await page.$eval(".back a", (a) => a.href);
  out.choices = await page.$$eval(".choice-name", (ns) => ns.map((n) => n.textContent));
  await page.click("#x402-connect");
  await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
  out.balance = await page.$eval("#x402-balance", (e) => e.textContent);
  out.account = await page.$eval("#x402-account", (e) => e.textContent);
  await page.screenshot({ path: `${shots}/paywall-connected.png`, fullPage: true });
  // The first paid request reaches the server (which settles it) but its answer is lost on the way back.
  await page.setRequestInterception(true);
  let lost = false;
  const sentHeaders = [];
  page.on("request", async (req) => {
    const header = req.headers()["payment-signature"];
    if (!header) return req.continue();
    sentHeaders.push(header);
    out.paymentsSent = sentHeaders.length;
    out.sameHeaderResent = sentHeaders.every((h) => h === sentHeaders[0]);
    if (lost) return req.continue();
    lost = true;
    const delivered = await fetch(req.url(), { headers: req.headers() });
    out.lostAnswerStatus = delivered.status;
    await delivered.arrayBuffer();
    return req.abort("connectionreset");
  });
  await page.click("#x402-pay");
  await page.waitForFunction(() => /could not be reached/.test(document.querySelector("#x402-status").textContent), { timeout: 60_000 });
  out.lostAnswer = await status(page);
  // Pay again: the page resends the same payment; the server delivers what was paid for, once.
  await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
  await page.click("#x402-pay");
  await page.waitForSelector(".receipt a", { timeout: 60_000 });
  out.articleTitle = await page.$eval("h1", (e) => e.textContent);
  out.paragraphs = await page.$$eval("main p", (ps) => ps.length);
  // The article once: its title is the heading, not a paragraph again.
  out.titleShownOnce = await page.$$eval("main p", (ps, t) => ps.every((p) => !p.textContent.startsWith(t)), out.articleTitle);
  out.paidBack = await page.$eval(".back a", (a) => a.href);
  out.receiptLinks = await page.$$eval(".receipt a", (as) => as.map((a) => a.href));
  await page.screenshot({ path: `${shots}/paywall-paid.png`, fullPage: true });
  await page.close();

  // The second license of an article sold under two: chosen on the page, paid at its own price.
  page = await open(browser, "second", twoLicenseUrl);
  out.secondChoices = await page.$$eval(".choice-name", (ns) => ns.map((n) => n.textContent));
  await page.screenshot({ path: `${shots}/paywall-two-licenses.png`, fullPage: true });
  await page.click("#x402-connect");
  await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
  await page.click("input[name=x402-offer][value='1']");
  await page.waitForFunction(() => /Ready to pay 0\.1 USDC/.test(document.querySelector("#x402-status").textContent), { timeout: TIMEOUT });
  out.secondPrice = await page.$eval("#x402-price", (e) => e.textContent);
  await page.screenshot({ path: `${shots}/paywall-second-chosen.png`, fullPage: true });
  // Its first attempt never reaches the server (the connection fails): the choice stays locked on the
  // payment signed, and Pay sends that same payment again.
  await page.setRequestInterception(true);
  const secondSent = [];
  page.on("request", (req) => {
    const header = req.headers()["payment-signature"];
    if (!header) return req.continue();
    secondSent.push(header);
    return secondSent.length === 1 ? req.abort("connectionrefused") : req.continue();
  });
  await page.click("#x402-pay");
  await page.waitForFunction(() => /could not be reached/.test(document.querySelector("#x402-status").textContent), { timeout: 60_000 });
  out.secondLocked = await page.$$eval("input[name=x402-offer]", (rs) => rs.every((r) => r.disabled));
  await page.waitForSelector("#x402-pay:not([disabled])", { timeout: TIMEOUT });
  await page.click("#x402-pay");
  await page.waitForSelector(".receipt a", { timeout: 60_000 });
  out.secondResentSame = secondSent.length === 2 && secondSent[0] === secondSent[1];
  out.secondReceipt = await page.$eval(".receipt", (e) => e.textContent);
  await page.screenshot({ path: `${shots}/paywall-second-paid.png`, fullPage: true });
  await page.close();

  // A phone.
  page = await open(browser, "phone");
  await page.setViewport({ width: 375, height: 812, isMobile: true, deviceScaleFactor: 2 });
  out.phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  await page.screenshot({ path: `${shots}/paywall-phone.png`, fullPage: true });
  await page.close();

  // The server's pages load without console errors (the receipt's certificate and verify URL included).
  const base = new URL(articleUrl).origin;
  const assets = await (await fetch(`${base}/api/v3/assets/?limit=1`)).json();
  const cid = assets.results[0].cid;
  const pages = {
    landing: `${base}/`,
    certificate: out.receiptLinks[0],
    receipt: out.receiptLinks[1],
    verify: `${base}/verify/${cid}`,
    browsable: `${base}/api/v3/assets/?format=api&limit=2&offset=2`,
    detail: `${base}/api/v3/assets/${cid}/?format=api`,
    docs: `${base}/docs/`,
    error: `${base}/x402Article?articleId=no-such-article`,
  };
  out.pages = {};
  for (const [name, url] of Object.entries(pages)) {
    page = await browser.newPage();
    page.on("console", (m) => {
      // The error page is a 404 document by design: Chromium logs that as a failed load.
      const own = name === "error" && m.location()?.url === url && /status of 404/.test(m.text());
      if (m.type() === "error" && !own) out.consoleErrors.push(`${name}: ${m.text()} (${m.location()?.url})`);
    });
    page.on("pageerror", (e) => out.consoleErrors.push(`${name}: ${e.message}`));
    const res = await page.goto(url, { waitUntil: "networkidle0" });
    out.pages[name] = { status: res.status(), title: await page.title() };
    if (name === "docs") await page.waitForSelector(".swagger-ui .info", { timeout: TIMEOUT });
    await page.screenshot({ path: `${shots}/page-${name}.png`, fullPage: false });
    if (name === "browsable") {
      out.pages[name].pageLinks = await page.$$eval("nav.pages a", (as) => as.map((a) => a.textContent));
      await page.click("#options-btn");
      await page.waitForFunction(() => /Asset List/.test(document.querySelector("#response").textContent), { timeout: TIMEOUT });
      out.pages[name].options = true;
    }
    if (name === "error") {
      out.pages[name].heading = await page.$eval("h1", (e) => e.textContent);
      out.pages[name].links = await page.$$eval("main a", (as) => as.map((a) => a.getAttribute("href")));
    }
    if (name === "browsable") {
      // The JSON first; the media previews folded below it.
      out.pages[name].responseFirst = await page.evaluate(() => {
        const pre = document.querySelector("#response"), previews = document.querySelector("details.previews");
        return !!pre && (!previews || (pre.compareDocumentPosition(previews) & Node.DOCUMENT_POSITION_FOLLOWING) > 0);
      });
    }
    if (name === "docs") {
      await page.waitForSelector(".swagger-ui .info", { timeout: TIMEOUT });
      out.pages[name].swagger = true;
    }
    await page.close();
  }
  // Every link of the landing page answers (articles 402 until paid).
  page = await browser.newPage();
  await page.goto(pages.landing);
  const links = await page.$$eval("a", (as) => as.map((a) => a.href));
  await page.close();
  out.landingLinks = {};
  for (const href of links) out.landingLinks[href] = (await fetch(href)).status;

  console.log(JSON.stringify(out));
} catch (error) {
  console.error(`browser-check: ${error?.stack ?? error}\n${JSON.stringify(out)}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
