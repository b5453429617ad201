// politerm's receipt plugin for opencode, written for one agent of one session.
//
// opencode loads it from the `plugin` list politerm adds to this agent's configuration
// (OPENCODE_CONFIG_CONTENT). Each event politerm cares about runs politerm's hook command
// (python -m politerm.hooks.emit CHANNEL opencode EVENT) with a JSON payload on stdin, as
// Claude Code and Gemini CLI do: that command redacts and writes the receipt. Calls run one
// after another, so the receipts keep the order of the events; none is awaited by the
// agent, so a slow hook never holds up a prompt.
import { spawn } from "node:child_process";

const EMIT = __POLI_EMIT__;
const BOUND_MS = __POLI_BOUND_MS__;

let queue = Promise.resolve();
const subagents = new Set(); // sessions a task tool started: not the agent politerm drives

function run(event, payload) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(EMIT[0], [...EMIT.slice(1), event], {
        stdio: ["pipe", "ignore", "ignore"],
      });
    } catch {
      resolve();
      return;
    }
    const timer = setTimeout(() => {
      try {
        child.kill();
      } catch {}
      resolve();
    }, BOUND_MS);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    child.on("error", done);
    child.on("close", done);
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}

function emit(event, payload) {
  queue = queue.then(() => run(event, payload)).catch(() => {});
}

function promptText(parts) {
  return (parts || [])
    .filter((p) => p && p.type === "text" && !p.synthetic && typeof p.text === "string")
    .map((p) => p.text)
    .join("\n");
}

export const PolitermReceipts = async () => {
  emit("plugin.loaded", {});
  return {
    "chat.message": async (input, output) => {
      if (!input || subagents.has(input.sessionID)) return;
      emit("chat.message", { sessionID: input.sessionID, prompt: promptText(output?.parts) });
    },
    event: async ({ event }) => {
      const p = (event && event.properties) || {};
      switch (event && event.type) {
        case "session.created":
          if (p.info && p.info.parentID) subagents.add(p.info.id);
          break;
        case "session.idle":
          if (!subagents.has(p.sessionID)) emit("session.idle", { sessionID: p.sessionID });
          break;
        case "permission.asked":
          emit("permission.asked", {
            sessionID: p.sessionID,
            tool_name: typeof p.permission === "string" ? p.permission : "",
            message: Array.isArray(p.patterns) ? p.patterns.join(" ") : "",
          });
          break;
        case "permission.replied":
          emit("permission.replied", {
            sessionID: p.sessionID,
            type: typeof p.reply === "string" ? p.reply : "",
          });
          break;
      }
    },
  };
};
