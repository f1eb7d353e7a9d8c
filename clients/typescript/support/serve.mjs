// Starts a real `sluice serve` for the tests (the binary in $SLUICE_BIN, else
// one built from this repository with `go build`) on a free loopback port.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
let built;
// Every file and directory the tests make lives here, removed at exit.
const tmp = mkdtempSync(join(tmpdir(), "sluice-ts-"));
process.on("exit", () => rmSync(tmp, { recursive: true, force: true }));

export function binary() {
  if (process.env.SLUICE_BIN) return process.env.SLUICE_BIN;
  if (!built) {
    built = join(tmp, "sluice");
    execFileSync("go", ["build", "-o", built, "./cmd/sluice"], { cwd: root, stdio: "inherit" });
  }
  return built;
}

export function tempFile(content) {
  const p = join(mkdtempSync(join(tmp, "f-")), "f");
  writeFileSync(p, content);
  return p;
}

/** serve(policy, ...args) resolves to {url, stop()} once the service serves. */
export function serve(policy, ...args) {
  return start(["--config", tempFile(policy), ...args]);
}

/** serveEnvoy(config, ...args) is serve for an Envoy ratelimit configuration (--envoy-config, --grpc 127.0.0.1:0). */
export function serveEnvoy(config, ...args) {
  const dir = mkdtempSync(join(tmp, "envoy-"));
  writeFileSync(join(dir, "config.yaml"), config);
  return start(["--envoy-config", dir, "--grpc", "127.0.0.1:0", ...args]);
}

function start(args) {
  const proc = spawn(binary(), ["serve", "--http", "127.0.0.1:0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  const logs = [];
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: proc.stderr });
    rl.on("line", (line) => {
      logs.push(line);
      try {
        const rec = JSON.parse(line);
        if (rec.msg === "sluice serving") {
          resolve({
            url: "http://" + rec.http,
            stop: () => new Promise((r) => { proc.once("exit", r); proc.kill("SIGTERM"); }),
          });
        }
      } catch {}
    });
    proc.once("exit", () => reject(new Error("sluice serve exited before serving:\n" + logs.join("\n"))));
  });
}
