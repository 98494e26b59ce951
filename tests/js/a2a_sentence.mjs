// The official A2A JavaScript SDK as an outside client of the gateway: one SendMessage with only
// the user's words, then each further argument as a follow-up text on the same task (an answer
// to what the gateway asked). Prints every task it got back as JSON, one per line.
//   node a2a_sentence.mjs URL TEXT [TOKEN] [ANSWER ...]
import { randomUUID } from "node:crypto";
import { Role, Task } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";

const [url, text, token = "", ...answers] = process.argv.slice(2);

function authorised(input, init = {}) {
  const headers = new Headers(init.headers);
  if (token) headers.set("Authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
}

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authorised })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: authorised }),
  }),
);
const client = await factory.createFromUrl(url);

function words(value, taskId = "") {
  return {
    messageId: randomUUID(),
    contextId: "",
    taskId,
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

let reply = await client.sendMessage({ tenant: "", message: words(text), configuration: undefined, metadata: undefined });
console.log(JSON.stringify(Task.toJSON(reply)));
for (const answer of answers) {
  reply = await client.sendMessage({
    tenant: "",
    message: words(answer, reply.id),
    configuration: undefined,
    metadata: undefined,
  });
  console.log(JSON.stringify(Task.toJSON(reply)));
}
