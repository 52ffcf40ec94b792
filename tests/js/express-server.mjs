// An official x402 resource server (`@x402/express` 2.x) that sells through a remote facilitator:
// GET /weather in `exact` over EIP-3009, GET /weather-permit2 in `exact` over Permit2, and GET /weather-upto in
// `upto` (the price is the maximum; the handler charges a quarter of it with the official
// `setSettlementOverrides`).
//
//     node express-server.mjs <facilitator url> <network> <asset> <eip712 name> <eip712 version> <payTo> <amount>
//
// Listens on a free loopback port and prints one JSON line {"url": "http://127.0.0.1:<port>/weather"} once ready
// (the other routes are beside it).
// With X402_FACILITATOR_TOKEN set, every facilitator call carries `Authorization: Bearer <token>` (the official
// client's createAuthHeaders hook).
import express from "express";
import { paymentMiddleware, setSettlementOverrides, x402ResourceServer } from "@x402/express";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { UptoEvmScheme } from "@x402/evm/upto/server";
import { HTTPFacilitatorClient } from "@x402/core/server";

const [facilitator, network, asset, name, version, payTo, amount] = process.argv.slice(2);
if (!amount) {
  console.error("usage: node express-server.mjs <facilitator url> <network> <asset> <name> <version> <payTo> <amount>");
  process.exit(2);
}

const token = process.env.X402_FACILITATOR_TOKEN;
const auth = { Authorization: `Bearer ${token}` };
const createAuthHeaders = token
  ? async () => ({ verify: auth, settle: auth, supported: auth })
  : undefined;
const resourceServer = new x402ResourceServer(new HTTPFacilitatorClient({ url: facilitator, createAuthHeaders }))
  .register(network, new ExactEvmScheme())
  .register(network, new UptoEvmScheme());
const route = (scheme, extra) => ({
  accepts: {
    scheme,
    price: { amount, asset, extra: { name, version, ...extra } },
    network,
    payTo,
    maxTimeoutSeconds: 120,
  },
  description: "weather report",
  mimeType: "application/json",
});

const app = express();
app.use(
  paymentMiddleware(
    {
      "GET /weather": route("exact", {}),
      "GET /weather-permit2": route("exact", { assetTransferMethod: "permit2" }),
      "GET /weather-upto": route("upto", {}),
    },
    resourceServer,
  ),
);
const report = (_req, res) => {
  res.json({ report: { weather: "sunny", temperature: 21 } });
};
app.get("/weather", report);
app.get("/weather-permit2", report);
app.get("/weather-upto", (req, res) => {
  setSettlementOverrides(res, { amount: String(BigInt(amount) / 4n) });
  report(req, res);
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}/weather` }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
