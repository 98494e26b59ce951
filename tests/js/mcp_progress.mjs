// The official MCP TypeScript SDK calls a governed tool with a progress token: each event of the
// task comes back as a progress notification while it runs (printed as one JSON line each), then
// the tool result.
//
//   node mcp_progress.mjs MCP_URL TOOL ARGUMENTS_JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, tool, argumentsJson] = process.argv.slice(2);
const client = new Client({ name: "agency-js-progress-test", version: "1.0.0" });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argumentsJson) }, undefined, {
    onprogress: (p) => console.log(JSON.stringify({ progress: p.progress, message: p.message ?? "" })),
    timeout: 30000,
  });
  console.log(JSON.stringify({ result: { isError: Boolean(result.isError), structuredContent: result.structuredContent ?? null } }));
  await client.close();
  process.exit(0);
} catch (error) {
  console.log(JSON.stringify({ error: String(error && (error.message || error)) }));
  process.exit(1);
}
