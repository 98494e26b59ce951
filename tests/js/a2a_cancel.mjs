// The official A2A JavaScript SDK cancels a governed task: node a2a_cancel.mjs BASE_URL
// Sends a message that stops for a clarification (input-required), cancels the task with
// tasks/cancel (CancelTask), cancels it again (refused: it has ended), and prints what it saw
// as one JSON line for the Python test.
import { randomUUID } from "node:crypto";
import { ClientFactory } from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";

const [baseUrl] = process.argv.slice(2);
const client = await new ClientFactory().createFromUrl(baseUrl);
const sent = await client.sendMessage({
  tenant: "",
  message: {
    messageId: randomUUID(),
    contextId: "",
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: "plan my trip" } }],
    metadata: { agency: { skill: "plan_trip" } },
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: undefined,
  metadata: undefined,
});
const canceled = await client.cancelTask({ tenant: "", id: sent.id, metadata: undefined });
let again = "";
try {
  await client.cancelTask({ tenant: "", id: sent.id, metadata: undefined });
} catch (error) {
  again = String(error?.message ?? error);
}
console.log(
  JSON.stringify({
    task_id: sent.id,
    before: TaskState[sent.status.state],
    after: TaskState[canceled.status.state],
    again,
  }),
);
