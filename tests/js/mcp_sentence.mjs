// The official MCP TypeScript SDK as an outside client of the gateway's MCP server (Streamable
// HTTP): calls governed_task with only the user's words. It declares elicitation: when the
// gateway asks for a missing field, the answer comes from ANSWERS (a JSON object, field -> value).
// Prints the tool result and every form it was asked to fill, as JSON.
//   node mcp_sentence.mjs URL TEXT [ANSWERS_JSON] [TOKEN]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, text, answersJson = "{}", token = ""] = process.argv.slice(2);
const answers = JSON.parse(answersJson);
const asked = [];

const client = new Client({ name: "plans-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  const fields = Object.keys(request.params.requestedSchema?.properties ?? {});
  const content = Object.fromEntries(fields.filter((f) => f in answers).map((f) => [f, answers[f]]));
  return fields.length && fields.every((f) => f in content) ? { action: "accept", content } : { action: "decline" };
});
const headers = token ? { Authorization: `Bearer ${token}` } : {};
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
const result = await client.callTool({ name: "governed_task", arguments: { text } });
console.log(JSON.stringify({ asked, result }));
await client.close();
