// This file implements Keys (the admin key's API keys) and Secrets (the
// caller's secrets, whose values go to the daemon and never come back).

import type { CallOptions } from "./files.js";
import type { Transport } from "./http.js";
import { toKeyInfo, toSecretInfo, type KeyInfo, type SecretInfo } from "./types.js";

/** A capability an API key may hold; `*` is every one. */
export type Capability =
  | "sandbox.exec"
  | "tools.shell"
  | "tools.python"
  | "tools.files"
  | "tools.git"
  | "tools.web"
  | "tools.env"
  | "tools.lint"
  | "*"
  | (string & {});

/** CreateKeyOptions describe a new API key. */
export interface CreateKeyOptions extends CallOptions {
  /** 1–64 characters, not `admin`. */
  name: string;
  /** Default every capability. */
  capabilities?: Capability[];
}

/**
 * Keys manages API keys; only the admin key may. A key sees only the
 * sandboxes it created, and calls only what its capabilities allow.
 */
export class Keys {
  readonly #t: Transport;

  /** @internal Made by Sbx. */
  constructor(t: Transport) {
    this.#t = t;
  }

  /** create makes a key and returns it with its secret, shown this once. */
  async create(opts: CreateKeyOptions): Promise<KeyInfo & { secret: string }> {
    const body: Record<string, unknown> = { name: opts.name };
    if (opts.capabilities !== undefined) body["capabilities"] = opts.capabilities;
    const w = await this.#t.json<Parameters<typeof toKeyInfo>[0]>({
      op: "create_key",
      method: "POST",
      path: "/v1/keys",
      json: body,
      signal: opts.signal,
    });
    return toKeyInfo(w) as KeyInfo & { secret: string };
  }

  /** list lists the keys, without their secrets. */
  async list(opts: CallOptions = {}): Promise<KeyInfo[]> {
    const w = await this.#t.json<{ keys: Parameters<typeof toKeyInfo>[0][] | null }>({
      op: "list_keys",
      method: "GET",
      path: "/v1/keys",
      signal: opts.signal,
    });
    return (w.keys ?? []).map(toKeyInfo);
  }

  /** revoke revokes a key by its id at once. */
  async revoke(id: string, opts: CallOptions = {}): Promise<void> {
    await this.#t.none({ op: "revoke_key", method: "DELETE", path: `/v1/keys/${encodeURIComponent(id)}`, signal: opts.signal });
  }
}

/** SetSecretOptions describe a secret to set. */
export interface SetSecretOptions extends CallOptions {
  /** 1–128 of `A-Z a-z 0-9 . _ -`, unique among the caller's secrets. */
  name: string;
  /** At most 64 KiB, no NUL (no CR or LF in proxy mode). Never shown again. */
  value: string;
  /** `env` (default): the value in the environment; `proxy`: a placeholder there, the value added by the egress proxy. */
  mode?: "env" | "proxy";
  /** Proxy mode: the hosts (and `*.wildcards`) the value may be sent to. */
  hosts?: string[];
}

/**
 * Secrets are the caller's own secrets: set once, then named in a create or
 * exec (`secrets: {ENV: "name"}`), so a value never travels in a request or
 * a command line. No answer carries a value.
 */
export class Secrets {
  readonly #t: Transport;

  /** @internal Made by Sbx. */
  constructor(t: Transport) {
    this.#t = t;
  }

  /** set creates a secret, or replaces the caller's secret of that name (`replaced` says which). */
  async set(opts: SetSecretOptions): Promise<{ secret: SecretInfo; replaced: boolean }> {
    const body: Record<string, unknown> = { name: opts.name, value: opts.value };
    if (opts.mode !== undefined) body["mode"] = opts.mode;
    if (opts.hosts !== undefined) body["hosts"] = opts.hosts;
    const resp = await this.#t.send({ op: "set_secret", method: "POST", path: "/v1/secrets", json: body, signal: opts.signal });
    const w = (await resp.json()) as Parameters<typeof toSecretInfo>[0];
    return { secret: toSecretInfo(w), replaced: resp.status === 200 };
  }

  /** list lists the caller's secrets, without values. */
  async list(opts: CallOptions = {}): Promise<SecretInfo[]> {
    const w = await this.#t.json<{ secrets: Parameters<typeof toSecretInfo>[0][] | null }>({
      op: "list_secrets",
      method: "GET",
      path: "/v1/secrets",
      signal: opts.signal,
    });
    return (w.secrets ?? []).map(toSecretInfo);
  }

  /** get describes one of the caller's secrets, without its value. */
  async get(name: string, opts: CallOptions = {}): Promise<SecretInfo> {
    const w = await this.#t.json<Parameters<typeof toSecretInfo>[0]>({
      op: "get_secret",
      method: "GET",
      path: `/v1/secrets/${encodeURIComponent(name)}`,
      signal: opts.signal,
    });
    return toSecretInfo(w);
  }

  /** delete deletes one of the caller's secrets; sandboxes that have it keep it until they end. */
  async delete(name: string, opts: CallOptions = {}): Promise<void> {
    await this.#t.none({ op: "delete_secret", method: "DELETE", path: `/v1/secrets/${encodeURIComponent(name)}`, signal: opts.signal });
  }
}
