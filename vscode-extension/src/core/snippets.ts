// Turns the configuration snippets of package.json into the configurations VS Code would write
// into launch.json (every tab stop at its default), and substitutes launch.json variables, so
// tests can check each snippet against the extension's validation and against the adapter.

/**
 * Expands VS Code snippet syntax to the text a user gets by accepting every default:
 * "${1:a.out}" → "a.out", "${2|x,y|}" → "x", "$1" → "", "\$" → "$".
 */
export function expandSnippetText(s: string): string {
  let out = '';
  let i = 0;
  while (i < s.length) {
    const ch = s[i];
    if (ch === '\\' && i + 1 < s.length && '$}\\'.includes(s[i + 1])) {
      out += s[i + 1];
      i += 2;
      continue;
    }
    if (ch === '$') {
      const tabstop = /^\$([0-9]+)/.exec(s.slice(i));
      if (tabstop) {
        i += tabstop[0].length;
        continue;
      }
      const choice = /^\$\{[0-9]+\|([^|]*)\|\}/.exec(s.slice(i));
      if (choice) {
        out += choice[1].split(',')[0];
        i += choice[0].length;
        continue;
      }
      const placeholder = /^\$\{[0-9]+(?::|\})/.exec(s.slice(i));
      if (placeholder) {
        // A placeholder's default may itself hold placeholders: find its matching brace.
        let depth = 1;
        let j = i + placeholder[0].length;
        if (placeholder[0].endsWith('}')) {
          i = j;
          continue;
        }
        const start = j;
        while (j < s.length && depth > 0) {
          if (s[j] === '\\') {
            j += 2;
            continue;
          }
          if (s[j] === '{' && s[j - 1] === '$') {
            depth++;
          } else if (s[j] === '}') {
            depth--;
          }
          j++;
        }
        out += expandSnippetText(s.slice(start, j - 1));
        i = j;
        continue;
      }
    }
    out += ch;
    i++;
  }
  return out;
}

/**
 * Materialises a configurationSnippets body: a string value starting with "^" is raw JSON in
 * snippet syntax; any other string is a snippet inside a JSON string.
 */
export function materializeSnippet(body: unknown): unknown {
  if (typeof body === 'string') {
    if (body.startsWith('^')) {
      return JSON.parse(expandSnippetText(body.slice(1)));
    }
    return expandSnippetText(body);
  }
  if (Array.isArray(body)) {
    return body.map(materializeSnippet);
  }
  if (typeof body === 'object' && body !== null) {
    return Object.fromEntries(Object.entries(body).map(([k, v]) => [k, materializeSnippet(v)]));
  }
  return body;
}

/**
 * Substitutes "${name}" variables in every string of a configuration, as VS Code does before
 * a session starts; "${command:x}" is looked up as "command:x". A string that is exactly one
 * variable takes the variable's value as is (so a picker may return a number). Unknown
 * variables are an error that names them.
 */
export function substituteVariables(v: unknown, vars: Record<string, unknown>): unknown {
  if (typeof v === 'string') {
    const whole = /^\$\{([^}]+)\}$/.exec(v);
    if (whole) {
      return lookup(whole[1], vars);
    }
    return v.replace(/\$\{([^}]+)\}/g, (_, name: string) => String(lookup(name, vars)));
  }
  if (Array.isArray(v)) {
    return v.map((x) => substituteVariables(x, vars));
  }
  if (typeof v === 'object' && v !== null) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substituteVariables(x, vars)]));
  }
  return v;
}

function lookup(name: string, vars: Record<string, unknown>): unknown {
  if (!(name in vars)) {
    throw new Error(`substitute variables: no value for \${${name}}`);
  }
  return vars[name];
}
