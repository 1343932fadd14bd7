/**
 * The two ways the demo ends early, each printed as one line (no stack): a mistake on the command line (exit 2)
 * and a backend it could not use (exit 3).
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
  readonly exitCode = 2;
}

export class BackendError extends Error {
  override readonly name = 'BackendError';
  readonly exitCode = 3;
}

/** The innermost useful message of an error, on one line: drivers wrap causes and add line breaks. */
export function oneLine(error: unknown): string {
  let current: unknown = error;
  let message = '';
  for (let depth = 0; depth < 5 && current !== undefined && current !== null; depth++) {
    if (current instanceof AggregateError && current.errors.length > 0) {
      current = current.errors[0];
      continue;
    }
    const text = current instanceof Error ? current.message : String(current);
    if (text.trim() !== '') message = text;
    if (!(current instanceof Error) || current.cause === undefined) break;
    current = current.cause;
  }
  if (message === '' && error instanceof Error) message = error.name;
  return message.replace(/\s+/g, ' ').trim();
}
