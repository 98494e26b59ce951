// A gRPC client in another language, from the .proto files alone: submit a task without waiting
// on one gateway, then follow it on another (WatchTask), printing each event as one JSON line.
//
//   node watch_task.mjs SUBMIT_ADDRESS WATCH_ADDRESS REQUEST_JSON
//
// REQUEST_JSON is a SubmitRequest (snake_case fields); return_immediately is set here. Exits 0
// once the stream ends with the task's outcome, 1 on an error (printed as {"error": ...}).
import path from "node:path";
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoDir = path.resolve(here, "..", "..", "proto");
const definition = protoLoader.loadSync(path.join(protoDir, "agency", "v1", "agency.proto"), {
  includeDirs: [protoDir],
  keepCase: true,
  longs: Number,
  defaults: true,
});
const agency = grpc.loadPackageDefinition(definition).agency.v1;

const [submitAddress, watchAddress, requestJson] = process.argv.slice(2);
const submitter = new agency.AgencyService(submitAddress, grpc.credentials.createInsecure());
const watcher = new agency.AgencyService(watchAddress, grpc.credentials.createInsecure());

function fail(error) {
  console.log(JSON.stringify({ error: String(error && (error.details || error.message || error)), code: error && error.code }));
  process.exit(1);
}

const request = { ...JSON.parse(requestJson), return_immediately: true };
submitter.Submit(request, { deadline: Date.now() + 20000 }, (error, accepted) => {
  if (error) return fail(error);
  console.log(JSON.stringify({ submitted: { task_id: accepted.task_id, state: accepted.state } }));
  const stream = watcher.WatchTask({ task_id: accepted.task_id, after_seq: 0 });
  stream.on("data", (event) => {
    const { final, ...rest } = event;
    console.log(JSON.stringify({ event: rest, final_state: final ? final.state : "" }));
  });
  stream.on("error", fail);
  stream.on("end", () => {
    submitter.close();
    watcher.close();
    process.exit(0);
  });
});
