// An official x402 resource server (`@x402/express` 2.x) that sells GET /weather through a remote facilitator.
//
//     node express-server.mjs <facilitator url> <network> <asset> <eip712 name> <eip712 version> <payTo> <amount>
//
// Listens on a free loopback port and prints one JSON line {"url": "http://127.0.0.1:<port>/weather"} once ready.
// With X402_FACILITATOR_TOKEN set, every facilitator call carries `Authorization: Bearer <token>` (the official
// client's createAuthHeaders hook).
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactEvmScheme } from "@x402/evm/exact/server";
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
const resourceServer = new x402ResourceServer(new HTTPFacilitatorClient({ url: facilitator, createAuthHeaders })).register(
  network,
  new ExactEvmScheme(),
);

const app = express();
app.use(
  paymentMiddleware(
    {
      "GET /weather": {
        accepts: {
          scheme: "exact",
          price: { amount, asset, extra: { name, version } },
          network,
          payTo,
          maxTimeoutSeconds: 120,
        },
        description: "weather report",
        mimeType: "application/json",
      },
    },
    resourceServer,
  ),
);
app.get("/weather", (_req, res) => {
  res.json({ report: { weather: "sunny", temperature: 21 } });
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}/weather` }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
