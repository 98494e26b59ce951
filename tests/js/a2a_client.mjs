// One A2A call with the official JavaScript SDK (@a2a-js/sdk), for the Python tests.
//
//   node a2a_client.mjs BASE_URL TOKEN STEP_JSON
//
// STEP_JSON: {"op": "send", "text": ..., "taskId"?: ..., "data"?: {...}, "metadata"?: {...}}
//            {"op": "get", "id": ...}
//            {"op": "list", "status"?: NAME, "pageSize"?: N}
//            {"op": "raw", "body": {...}}           (a JSON-RPC request as written, sent by fetch)
// Prints one JSON line: the result, or {"error": {"code", "message"}}.
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { TaskState, Role } from "@a2a-js/sdk";
import { randomUUID } from "node:crypto";

const [baseUrl, token, stepJson] = process.argv.slice(2);
const step = JSON.parse(stepJson);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const authFetch = (url, init = {}) => fetch(url, { ...init, headers: { ...(init.headers || {}), ...headers } });

function taskOut(task) {
  return {
    kind: "task",
    id: task.id,
    state: TaskState[task.status?.state] ?? String(task.status?.state),
    artifacts: (task.artifacts || []).map((a) => ({
      name: a.name,
      parts: (a.parts || []).map((p) => p.content),
    })),
    statusText: (task.status?.message?.parts || [])
      .filter((p) => p.content?.$case === "text")
      .map((p) => p.content.value)
      .join(" "),
  };
}

async function main() {
  if (step.op === "raw") {
    const response = await authFetch(`${baseUrl}/a2a/jsonrpc`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "A2A-Version": "1.0" },
      body: JSON.stringify(step.body),
    });
    return { status: response.status, body: await response.json() };
  }
  const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
    preferredTransports: ["JSONRPC"],
  });
  const client = await new ClientFactory(options).createFromUrl(baseUrl);
  if (step.op === "send") {
    const parts = [{ content: { $case: "text", value: step.text } }];
    if (step.data) parts.push({ content: { $case: "data", value: step.data } });
    const result = await client.sendMessage({
      message: {
        messageId: randomUUID(),
        role: Role.ROLE_USER,
        parts,
        taskId: step.taskId || "",
        contextId: step.contextId || "",
        metadata: step.metadata,
        extensions: [],
        referenceTaskIds: [],
      },
    });
    if (result && "status" in result) return taskOut(result);
    return { kind: "message", message: result };
  }
  if (step.op === "get") return taskOut(await client.getTask({ id: step.id }));
  if (step.op === "list") {
    const page = await client.listTasks({
      status: step.status ? TaskState[step.status] : undefined,
      pageSize: step.pageSize,
    });
    return { tasks: (page.tasks || []).map(taskOut) };
  }
  throw new Error(`unknown op ${step.op}`);
}

try {
  console.log(JSON.stringify(await main()));
} catch (err) {
  const code = err?.code ?? err?.errorResponse?.error?.code ?? err?.cause?.code ?? null;
  console.log(JSON.stringify({ error: { code, reason: err?.reason ?? null, message: String(err?.message ?? err), name: err?.name } }));
}
