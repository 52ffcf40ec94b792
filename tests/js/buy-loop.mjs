// Buys one URL over and over with the official v2 client (`@x402/fetch` + `@x402/evm`), `concurrency` purchases
// in flight, for `seconds`: the JavaScript side of the load tool's `clients` mode.
//
//     node buy-loop.mjs <url> <private key> <seconds> <concurrency>
//
// Prints one JSON line: {ok, other, seconds, cpuMicros} (cpuMicros: this process's user + system CPU).
import { x402Client, wrapFetchWithPayment } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const [url, key, seconds, concurrency] = process.argv.slice(2);
if (!concurrency) {
  console.error("usage: node buy-loop.mjs <url> <private key> <seconds> <concurrency>");
  process.exit(2);
}
const client = new x402Client();
registerExactEvmScheme(client, { signer: privateKeyToAccount(key) });
client.setSpendControls({ allowedAssets: true });
const pay = wrapFetchWithPayment(fetch, client);

const deadline = performance.now() + Number(seconds) * 1000;
const cpu0 = process.cpuUsage();
const start = performance.now();
let ok = 0;
let other = 0;
async function worker() {
  while (performance.now() < deadline) {
    try {
      const res = await pay(url, { method: "GET" });
      await res.arrayBuffer();
      if (res.status === 200) ok += 1;
      else other += 1;
    } catch {
      other += 1;
    }
  }
}
await Promise.all(Array.from({ length: Number(concurrency) }, worker));
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ ok, other, seconds: (performance.now() - start) / 1000, cpuMicros: cpu.user + cpu.system }));
