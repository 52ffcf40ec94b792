"use strict";
(function () {
  var data = JSON.parse(document.getElementById("x402-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  // The offer the reader chose (one radio button per offer, in the order of `accepts`).
  var offer = data.accepts[0];
  var chainId = Number(offer.network.split(":")[1]);
  // `pending`: a signed payment whose answer is not known yet (lost, or settlement pending): sent again as is,
  // never signed anew, so a retry can never pay twice.
  var state = { provider: null, account: null, pending: null };
  // The server's reasons in words: the table of src/paywall.rs, sent with the requirements.
  var REASONS = data.reasons || {};
  var UNIT = data.unit || "USDC";
  function say(text, kind) {
    var s = $("x402-status");
    s.textContent = text;
    s.className = kind || "";
  }
  function units(raw, decimals) {
    var v = BigInt(raw), d = BigInt(10) ** BigInt(decimals);
    var frac = (v % d).toString().padStart(decimals, "0").replace(/0+$/, "");
    return (v / d).toString() + (frac ? "." + frac : "");
  }
  function hex(n) { return "0x" + n.toString(16); }
  function providers() {
    var found = [];
    window.addEventListener("eip6963:announceProvider", function (e) {
      if (e.detail && e.detail.provider) found.push(e.detail);
    });
    window.dispatchEvent(new Event("eip6963:requestProvider"));
    return found;
  }
  var announced = providers();
  function pickProvider() {
    if (announced.length > 0) return announced[0].provider;
    return window.ethereum || null;
  }
  async function ensureChain(p) {
    var current = Number(await p.request({ method: "eth_chainId" }));
    if (current === chainId) return;
    try {
      await p.request({ method: "wallet_switchEthereumChain", params: [{ chainId: hex(chainId) }] });
    } catch (e) {
      if (e && e.code === 4902 && data.chain) {
        await p.request({ method: "wallet_addEthereumChain", params: [data.chain] });
      } else {
        throw new Error("Switch your wallet to " + data.networkName + " to pay.");
      }
    }
  }
  function word(address) { return address.slice(2).toLowerCase().padStart(64, "0"); }
  async function read(p, to, data) {
    return BigInt(await p.request({ method: "eth_call", params: [{ to: to, data: data }, "latest"] }));
  }
  async function balance(p, account) {
    return read(p, offer.asset, "0x70a08231" + word(account));
  }
  // `exact` over Permit2 (a token without EIP-3009): Permit2 moves the tokens, once the wallet allowed it to;
  // a wallet that has not signs an EIP-2612 permit the server applies (`eip2612GasSponsoring`), or else
  // sends one approval transaction first.
  var PERMIT2 = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
  var EXACT_PROXY = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001";
  var SPONSORING = "eip2612GasSponsoring";
  function overPermit2() { return !!(offer.extra && offer.extra.assetTransferMethod === "permit2"); }
  function sponsored() { return !!(data.extensions && data.extensions[SPONSORING]); }
  async function allowanceShort(p, account) {
    if (!overPermit2()) return false;
    return (await read(p, offer.asset, "0xdd62ed3e" + word(account) + word(PERMIT2))) < BigInt(offer.amount);
  }
  function ready(short) {
    var price = units(offer.amount, data.decimals) + " " + UNIT;
    if (!short) return "Ready to pay " + price + ".";
    return sponsored()
      ? "Ready to pay " + price + ": your wallet also signs a permit for Permit2, applied with the payment (no gas)."
      : "Ready to pay " + price + ": your wallet first sends one transaction allowing Permit2 to move the token (it needs a little ETH for gas).";
  }
  function domainType(withVersion) {
    var t = [{ name: "name", type: "string" }];
    if (withVersion) t.push({ name: "version", type: "string" });
    return t.concat([{ name: "chainId", type: "uint256" }, { name: "verifyingContract", type: "address" }]);
  }
  async function sign(p, from, typed) {
    return p.request({ method: "eth_signTypedData_v4", params: [from, JSON.stringify(typed)] });
  }
  // The EIP-2612 permit for Permit2 (the extension's info), signed under the token's own domain.
  async function permitForPermit2(p, from, deadline) {
    var nonce = (await read(p, offer.asset, "0x7ecebe00" + word(from))).toString();
    var message = { owner: from, spender: PERMIT2, value: offer.amount, nonce: nonce, deadline: deadline };
    var signature = await sign(p, from, {
      types: {
        EIP712Domain: domainType(true),
        Permit: [{ name: "owner", type: "address" }, { name: "spender", type: "address" }, { name: "value", type: "uint256" },
          { name: "nonce", type: "uint256" }, { name: "deadline", type: "uint256" }],
      },
      primaryType: "Permit",
      domain: { name: offer.extra.name, version: offer.extra.version, chainId: chainId, verifyingContract: offer.asset },
      message: message,
    });
    return { from: from, asset: offer.asset, spender: PERMIT2, amount: offer.amount, nonce: nonce, deadline: deadline, signature: signature, version: "1" };
  }
  // One approval transaction, waited for (bounded).
  async function approvePermit2(p, from) {
    var data = "0x095ea7b3" + word(PERMIT2) + "f".repeat(64);
    var hash = await p.request({ method: "eth_sendTransaction", params: [{ from: from, to: offer.asset, data: data }] });
    for (var i = 0; i < 120; i++) {
      var receipt = await p.request({ method: "eth_getTransactionReceipt", params: [hash] });
      if (receipt) {
        if (receipt.status !== "0x1") throw new Error("The approval transaction failed.");
        return;
      }
      await new Promise(function (r) { setTimeout(r, 1000); });
    }
    throw new Error("The approval transaction was not mined within two minutes.");
  }
  // The payload of `exact` over Permit2, as the official clients write it, and the extensions to send.
  async function payPermit2(p, from, deadline, extensions) {
    if (await allowanceShort(p, from)) {
      if (sponsored()) {
        extensions[SPONSORING] = { info: await permitForPermit2(p, from, deadline) };
      } else {
        say("Confirm the approval of Permit2 in your wallet...", "");
        await approvePermit2(p, from);
      }
    }
    var nonce = BigInt(randomNonce()).toString();
    var authorization = {
      from: from,
      permitted: { token: offer.asset, amount: offer.amount },
      spender: EXACT_PROXY,
      nonce: nonce,
      deadline: deadline,
      witness: { to: offer.payTo, validAfter: "0" },
    };
    say("Confirm the payment in your wallet...", "");
    var signature = await sign(p, from, {
      types: {
        EIP712Domain: domainType(false),
        PermitWitnessTransferFrom: [{ name: "permitted", type: "TokenPermissions" }, { name: "spender", type: "address" },
          { name: "nonce", type: "uint256" }, { name: "deadline", type: "uint256" }, { name: "witness", type: "Witness" }],
        TokenPermissions: [{ name: "token", type: "address" }, { name: "amount", type: "uint256" }],
        Witness: [{ name: "to", type: "address" }, { name: "validAfter", type: "uint256" }],
      },
      primaryType: "PermitWitnessTransferFrom",
      domain: { name: "Permit2", chainId: chainId, verifyingContract: PERMIT2 },
      message: { permitted: authorization.permitted, spender: EXACT_PROXY, nonce: nonce, deadline: deadline, witness: authorization.witness },
    });
    return { signature: signature, permit2Authorization: authorization };
  }
  async function connect() {
    var p = pickProvider();
    if (!p) {
      say("No wallet found in this browser. Install a wallet (MetaMask, Coinbase Wallet...) or pay with an x402 client.", "error");
      return;
    }
    try {
      var accounts = await p.request({ method: "eth_requestAccounts" });
      state.provider = p;
      state.account = accounts[0];
      await ensureChain(p);
      var have = await balance(p, state.account);
      $("x402-account").textContent = state.account;
      $("x402-balance").textContent = units(have, data.decimals) + " " + UNIT;
      $("x402-wallet").hidden = false;
      $("x402-connect").hidden = true;
      if (have < BigInt(offer.amount)) {
        say("Your balance is lower than the price: add " + UNIT + " on " + data.networkName + " to pay.", "error");
        return;
      }
      var short = await allowanceShort(p, state.account);
      $("x402-pay").disabled = false;
      say(ready(short), "");
    } catch (e) {
      say(e && e.code === 4001 ? "You declined the connection." : (e && e.message) || "The wallet could not connect.", "error");
    }
  }
  function randomNonce() {
    var b = new Uint8Array(32);
    crypto.getRandomValues(b);
    return "0x" + Array.prototype.map.call(b, function (x) { return x.toString(16).padStart(2, "0"); }).join("");
  }
  function b64(text) {
    var bytes = new TextEncoder().encode(text), s = "";
    for (var i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s);
  }
  async function pay() {
    $("x402-pay").disabled = true;
    if (state.pending) return send(state.pending);
    var p = state.provider, from = state.account;
    var deadline = String(Math.floor(Date.now() / 1000) + (offer.maxTimeoutSeconds || 300));
    var extensions = Object.assign({}, data.extensions || {});
    delete extensions[SPONSORING];
    if (overPermit2()) {
      var permitted;
      try {
        permitted = await payPermit2(p, from, deadline, extensions);
      } catch (e) {
        say(e && e.code === 4001 ? "You rejected it in your wallet. Nothing was charged." : "The wallet could not sign: " + ((e && e.message) || e), "error");
        $("x402-pay").disabled = false;
        return;
      }
      return sendNew({ x402Version: 2, resource: data.resource, accepted: offer, payload: permitted, extensions: extensions });
    }
    var authorization = {
      from: from,
      to: offer.payTo,
      value: offer.amount,
      validAfter: "0",
      validBefore: deadline,
      nonce: randomNonce(),
    };
    var typed = {
      types: {
        EIP712Domain: [
          { name: "name", type: "string" }, { name: "version", type: "string" },
          { name: "chainId", type: "uint256" }, { name: "verifyingContract", type: "address" },
        ],
        TransferWithAuthorization: [
          { name: "from", type: "address" }, { name: "to", type: "address" }, { name: "value", type: "uint256" },
          { name: "validAfter", type: "uint256" }, { name: "validBefore", type: "uint256" }, { name: "nonce", type: "bytes32" },
        ],
      },
      primaryType: "TransferWithAuthorization",
      domain: { name: offer.extra.name, version: offer.extra.version, chainId: chainId, verifyingContract: offer.asset },
      message: authorization,
    };
    var signature;
    try {
      say("Confirm the payment in your wallet...", "");
      signature = await p.request({ method: "eth_signTypedData_v4", params: [from, JSON.stringify(typed)] });
    } catch (e) {
      say(e && e.code === 4001 ? "You rejected the signature. Nothing was charged." : "The wallet could not sign: " + ((e && e.message) || e), "error");
      $("x402-pay").disabled = false;
      return;
    }
    return sendNew({ x402Version: 2, resource: data.resource, accepted: offer, payload: { signature: signature, authorization: authorization }, extensions: extensions });
  }
  // A new signed payment: kept until it is answered (a retry sends it again, never signs anew).
  function sendNew(payment) {
    if (Object.keys(payment.extensions).length === 0) delete payment.extensions;
    state.pending = b64(JSON.stringify(payment));
    lockChoices(true);
    return send(state.pending);
  }
  async function send(header) {
    say("Paying...", "");
    var res;
    try {
      res = await fetch(location.href, { headers: { "PAYMENT-SIGNATURE": header, Accept: "application/json, text/html;q=0.9" } });
    } catch (e) {
      say("The server could not be reached. Press Pay to send the same payment again: it is never taken twice.", "error");
      $("x402-pay").disabled = false;
      return;
    }
    if (res.ok) {
      state.pending = null;
      return show(res);
    }
    var reason = "";
    try { reason = JSON.parse(atob(res.headers.get("PAYMENT-REQUIRED"))).error || ""; } catch (e) { reason = ""; }
    // A refused payment is over (nothing was taken): the next Pay signs a new one. A pending one is resent.
    if (reason === "settlement_pending") {
      say(REASONS.settlement_pending + " Press Pay to ask again.", "");
    } else {
      state.pending = null;
      lockChoices(false);
      say("The payment was refused: " + (REASONS[reason] || reason || ("HTTP " + res.status)), "error");
    }
    $("x402-pay").disabled = false;
  }
  function link(href, text) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }
  async function show(res) {
    var type = res.headers.get("content-type") || "";
    if (type.indexOf("text/html") === 0) {
      var html = await res.text();
      document.open();
      document.write(html);
      document.close();
      return;
    }
    var body = await res.json();
    var main = $("x402-main");
    main.textContent = "";
    if (data.back) {
      var back = document.createElement("p");
      back.className = "back";
      back.append(link(data.back.href, "← " + data.back.text));
      main.append(back);
    }
    if (body && body.article && body.article.content) {
      var h = document.createElement("h1");
      h.textContent = body.article.title;
      var by = document.createElement("p");
      by.className = "by";
      by.textContent = "by " + body.article.author_name;
      main.append(h, by);
      body.article.content.split(/\n\n+/).forEach(function (para, i) {
        // The text may open with its own title and byline, shown above already.
        if (i === 0 && para.split("\n")[0].trim() === body.article.title) return;
        var el = document.createElement("p");
        el.textContent = para;
        main.append(el);
      });
      if (body.receipt) {
        var r = document.createElement("p");
        r.className = "receipt";
        var license = body.receipt.license && body.receipt.license.id;
        r.append(license ? "Your license \u201c" + license + "\u201d: " : "Your license: ",
          link(body.receipt.certificate.url, "certificate"), " · ",
          link(body.receipt.nft.verifyUrl, "receipt " + body.receipt.nft.tokenId.slice(0, 12) + "…"));
        main.append(r);
      }
    } else {
      var pre = document.createElement("pre");
      pre.textContent = JSON.stringify(body, null, 2);
      main.append(pre);
    }
  }
  // A signed payment whose answer is not known yet may have been taken: until it is answered, the choice
  // stays as it was paid (Pay sends that payment again), so a lost answer never leads to a second purchase.
  function lockChoices(locked) {
    Array.prototype.forEach.call(document.querySelectorAll("input[name=x402-offer]"), function (r) {
      r.disabled = locked;
    });
  }
  async function choose() {
    var picked = document.querySelector("input[name=x402-offer]:checked");
    offer = data.accepts[picked ? Number(picked.value) : 0] || data.accepts[0];
    chainId = Number(offer.network.split(":")[1]);
    $("x402-price").textContent = units(offer.amount, data.decimals);
    if (!state.account) return;
    try {
      await ensureChain(state.provider);
      var have = await balance(state.provider, state.account);
      $("x402-balance").textContent = units(have, data.decimals) + " " + UNIT;
      var enough = have >= BigInt(offer.amount);
      var short = enough && await allowanceShort(state.provider, state.account);
      $("x402-pay").disabled = !enough;
      say(enough ? ready(short)
        : "Your balance is lower than the price: add " + UNIT + " on " + data.networkName + " to pay.", enough ? "" : "error");
    } catch (e) {
      say((e && e.message) || "The wallet could not be read.", "error");
    }
  }
  Array.prototype.forEach.call(document.querySelectorAll("input[name=x402-offer]"), function (r) {
    r.addEventListener("change", choose);
  });
  $("x402-connect").addEventListener("click", connect);
  $("x402-pay").addEventListener("click", pay);
  $("x402-connect").disabled = false;
})();
