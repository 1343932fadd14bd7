/** Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its hash tag, modulo 16384. */

const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  TABLE[i] = crc;
}

export const SLOTS = 16_384;

/** The hashed part: the text between the first `{` and the next `}` when that is not empty, else the whole key. */
function hashed(key: Buffer): Buffer {
  const open = key.indexOf(0x7b);
  if (open === -1) return key;
  const close = key.indexOf(0x7d, open + 1);
  if (close === -1 || close === open + 1) return key;
  return key.subarray(open + 1, close);
}

export function keySlot(key: string): number {
  let crc = 0;
  for (const byte of hashed(Buffer.from(key)))
    crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ byte) & 0xff] as number);
  return crc % SLOTS;
}
