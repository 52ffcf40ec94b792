// The legacy official x402 v1 resource server (`x402-express` 1.x) that sells GET /weather through a remote
// facilitator, answering 402 with the v1 JSON body only.
//
//     node express-v1-server.mjs <facilitator url> <v1 network name> <asset> <eip712 name> <eip712 version> <payTo> <amount>
//
// Listens on a free loopback port and prints one JSON line {"url": "http://127.0.0.1:<port>/weather"} once ready.
// With X402_FACILITATOR_TOKEN set, every facilitator call carries `Authorization: Bearer <token>`.
import express from "express";
import { paymentMiddleware } from "x402-express";

const [facilitator, network, asset, name, version, payTo, amount] = process.argv.slice(2);
if (!amount) {
  console.error("usage: node express-v1-server.mjs <facilitator url> <network> <asset> <name> <version> <payTo> <amount>");
  process.exit(2);
}
const token = process.env.X402_FACILITATOR_TOKEN;
const auth = { Authorization: `Bearer ${token}` };
const createAuthHeaders = token ? async () => ({ verify: auth, settle: auth, supported: auth }) : undefined;

const app = express();
app.use(
  paymentMiddleware(
    payTo,
    {
      "GET /weather": {
        price: { amount, asset: { address: asset, decimals: 6, eip712: { name, version } } },
        network,
        config: { description: "weather report", mimeType: "application/json", maxTimeoutSeconds: 120 },
      },
    },
    { url: facilitator, createAuthHeaders },
  ),
);
app.get("/weather", (_req, res) => {
  res.json({ report: { weather: "sunny", temperature: 21 } });
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}/weather` }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
