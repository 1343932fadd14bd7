/**
 * The errors a call ends with name the lock (`acquire "invoice:42" did not answer…`), and an adapter's errors quote
 * the keys and paths it made of the name (`ZooKeeper multi /dlock/inv%20%7B42%7D/_c_…`): recorded as they are, the
 * status message and the exception event would carry every name the attributes leave out. Unless the mapping kept
 * the name whole (the caller's decision to record names), each occurrence that is not part of a longer word becomes
 * `<lock>`: a short name such as `a` must not take letters out of the words of the message. An occurrence is the
 * name with any of its characters written as the adapters write them: percent-encoded UTF-8 bytes (ZooKeeper paths,
 * etcd and Redis keys escape different sets, so any character may be), or a JSON string escape (an adapter showing
 * an unexpected reply as JSON). A name cut short where a text was shortened (the Redis adapter shows an unexpected
 * reply cut at 200 characters) is an occurrence too: at least {@link CUT_MIN} of its first characters, maybe with
 * the start of the next one's escape, ending a line. Names are never hashed into keys or messages (no adapter does).
 */
export function nameRedactor(name: string): (text: string) => string {
  let occurrence: RegExp;
  try {
    const forms = Array.from(name, characterForms);
    const whole = `${forms.join('')}(?![\\p{L}\\p{N}_])`;
    occurrence = new RegExp(`(?<![\\p{L}\\p{N}_])(?:${whole}${cutShort(forms)})`, 'gu');
  } catch {
    // A name the pattern cannot hold: every occurrence as written goes, even inside a word.
    return (text) => text.split(name).join('<lock>');
  }
  return (text) => text.replace(occurrence, '<lock>');
}

/**
 * The fewest first characters of a name taken for the name where a line ends: a cut may leave any number, but a
 * short one would be taken from the words that end messages (`within 500 ms`), and leaks little.
 */
const CUT_MIN = 8;

/** The start of an escape cut in its middle: `%`, `%7`, `%C3%B`, `\`, `\u00`. */
const PARTIAL_ESCAPE =
  '(?:(?:%[0-9A-Fa-f]{2}){0,3}%[0-9A-Fa-f]?|(?:\\\\u[0-9A-Fa-f]{4})?\\\\(?:u[0-9A-Fa-f]{0,3})?)?';

/**
 * The most of a name's first characters a cut is matched against one by one. Each one more is a level of nesting
 * the regex engine backtracks through at every place the text could start a name, and the cost grows faster than
 * the name: a 1,024-character name of one repeated character, against a message of near-copies of it, held the
 * event loop for 3 s on 4,096 characters and 7 s on a stack of 8,192 (128 characters: under 40 ms).
 */
const CUT_SPAN = 128;

/**
 * An alternative for a name (as character patterns) cut short: its first {@link CUT_MIN} characters or more, fewer
 * than all, then the end of a line. Nested optional groups keep the pattern as long as the name's, up to
 * {@link CUT_SPAN} characters; past those, the rest of the line goes with them: 128 characters of the name are
 * taken for the name, and a few more words lost from a message leak nothing.
 */
function cutShort(forms: readonly string[]): string {
  if (forms.length <= CUT_MIN) return '';
  const last = Math.min(forms.length - 2, CUT_SPAN - 1);
  let rest = forms.length - 2 > last ? '[^\\r\\n]*' : '';
  for (let i = last; i >= CUT_MIN; i--) rest = `(?:${forms[i]}${rest})?`;
  return `|${forms.slice(0, CUT_MIN).join('')}${rest}${PARTIAL_ESCAPE}(?![^\\r\\n])`;
}

const utf8 = new TextEncoder();

/** Hex digits either case: encoders differ (`%2F`, `%2f`, `\u00E9`, `\u00e9`). */
function hexPattern(value: number, digits: number): string {
  return Array.from(value.toString(16).padStart(digits, '0'), (d) =>
    /[0-9]/.test(d) ? d : `[${d}${d.toUpperCase()}]`,
  ).join('');
}

/** A pattern for one character of a name: as it is, percent-encoded, or JSON-escaped. */
function characterForms(character: string): string {
  const code = character.codePointAt(0) as number;
  const forms = [`\\u{${code.toString(16)}}`];
  forms.push(Array.from(utf8.encode(character), (byte) => `%${hexPattern(byte, 2)}`).join(''));
  const json = JSON.stringify(character).slice(1, -1);
  if (json !== character) forms.push(json.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&'));
  const units = code > 0xffff ? [character.charCodeAt(0), character.charCodeAt(1)] : [code];
  forms.push(units.map((unit) => `\\\\u${hexPattern(unit, 4)}`).join(''));
  return `(?:${forms.join('|')})`;
}
