// MCP calls with the official TypeScript SDK (@modelcontextprotocol/sdk), for the Python tests.
//
//   node mcp_client.mjs URL TOKEN STEP_JSON
//
// STEP_JSON: {"op": "call", "name": ..., "arguments": {...}, "elicit"?: ANSWER}
//              (with "elicit" the client declares elicitation and answers every form with
//               {"answer": ANSWER}; the forms it was shown are returned as "elicited")
//            {"op": "concurrent", "name": ..., "arguments": {...}, "calls": N, "clients": M, "inFlight": K}
// Prints one JSON line: the result, or {"error": {"code", "message"}}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, stepJson] = process.argv.slice(2);
const step = JSON.parse(stepJson);
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : {};

async function connect(elicit) {
  const capabilities = elicit !== undefined ? { elicitation: { form: {} } } : {};
  const client = new Client({ name: "agency-tests", version: "1.0.0" }, { capabilities });
  const elicited = [];
  if (elicit !== undefined) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      elicited.push(request.params);
      return { action: "accept", content: { answer: elicit } };
    });
  }
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
  return { client, elicited };
}

async function main() {
  if (step.op === "call") {
    const { client, elicited } = await connect(step.elicit);
    try {
      const result = await client.callTool({ name: step.name, arguments: step.arguments || {} });
      return { result, elicited };
    } finally {
      await client.close();
    }
  }
  if (step.op === "concurrent") {
    const clients = await Promise.all(Array.from({ length: step.clients || 4 }, () => connect(undefined)));
    const failures = [];
    let ok = 0;
    let next = 0;
    // "inFlight" workers take the calls one after another (each in-flight call is a connection)
    await Promise.all(
      Array.from({ length: step.inFlight || 32 }, async (_, w) => {
        for (let i = next++; i < step.calls; i = next++) {
          const { client } = clients[(i + w) % clients.length];
          try {
            const result = await client.callTool({ name: step.name, arguments: step.arguments || {} });
            if (result.isError) failures.push(JSON.stringify(result.content));
            else ok += 1;
          } catch (err) {
            failures.push(String(err?.message ?? err));
          }
        }
      }),
    );
    await Promise.all(clients.map(({ client }) => client.close()));
    return { ok, failures };
  }
  throw new Error(`unknown op ${step.op}`);
}

try {
  console.log(JSON.stringify(await main()));
} catch (err) {
  console.log(JSON.stringify({ error: { code: err?.code ?? null, message: String(err?.message ?? err) } }));
}
