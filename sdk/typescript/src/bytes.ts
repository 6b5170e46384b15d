// This file implements the byte plumbing: base64, and the sources an upload
// accepts turned into a request body that is streamed, never held whole.

/**
 * UploadSource is what an upload reads: bytes or text held in memory, a Blob,
 * or a stream of chunks (a web ReadableStream, or any async or sync iterable
 * of Uint8Array, such as a Node Readable from fs.createReadStream). Streams
 * are sent as they are read: memory stays bounded whatever their size.
 */
export type UploadSource =
  | Uint8Array
  | ArrayBuffer
  | string
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array>
  | Iterable<Uint8Array>;

/** @internal */
export function toBase64(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64");
}

/** @internal */
export function fromBase64(s: string): Uint8Array {
  const b = Buffer.from(s, "base64");
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** @internal toBody turns an upload source into a fetch body. */
export function toBody(src: UploadSource): NonNullable<RequestInit["body"]> {
  if (typeof src === "string") return new TextEncoder().encode(src);
  if (src instanceof Uint8Array || src instanceof ArrayBuffer || src instanceof Blob) return src;
  if (src instanceof ReadableStream) return src;
  if (Symbol.asyncIterator in src) return fromIterator((src as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]());
  if (Symbol.iterator in src) return fromIterator((src as Iterable<Uint8Array>)[Symbol.iterator]());
  throw new TypeError("upload source: expected bytes, a string, a Blob, a ReadableStream or an iterable of Uint8Array");
}

/**
 * fromIterator makes a ReadableStream that pulls one chunk from it each time
 * the reader wants one, so the source is read only as fast as it is sent.
 */
function fromIterator(it: AsyncIterator<Uint8Array> | Iterator<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const r = await it.next();
        if (r.done) {
          controller.close();
          return;
        }
        const chunk = r.value;
        if (!(chunk instanceof Uint8Array)) {
          controller.error(new TypeError("upload source: every chunk must be a Uint8Array"));
          return;
        }
        controller.enqueue(chunk);
      },
      async cancel(reason) {
        await it.return?.(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/** @internal collect reads a stream to its end into one array. */
export async function collect(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let n = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    n += value.byteLength;
  }
  return concat(parts, n);
}

/** @internal */
export function concat(parts: Uint8Array[], n = parts.reduce((s, p) => s + p.byteLength, 0)): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.byteLength;
  }
  return out;
}
