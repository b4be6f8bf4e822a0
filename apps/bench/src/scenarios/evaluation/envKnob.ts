/**
 * A numeric bench knob from the environment: undefined when unset or empty (the library's
 * default applies); a value `accept` refuses throws, naming the variable and what it must be.
 * A blank value is refused too: Number(' ') is 0, which must not quietly set a knob.
 */
export function numberKnob(
  name: string,
  value: string | undefined,
  accept: (x: number) => boolean,
  must: string,
): number | undefined {
  if (value === undefined || value === '') return undefined;
  const x = value.trim() === '' ? Number.NaN : Number(value);
  if (!accept(x)) throw new Error(`${name} must be ${must}, not ${value}`);
  return x;
}
