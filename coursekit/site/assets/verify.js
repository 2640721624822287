// coursekit site: verify a certificate in the browser, with the rules of `coursekit verify`.
//
// It mirrors coursekit/grading/records/{keys,credentials,summary,baking,certificates}.py:
// canonical base64url only, strict JSON (no duplicate key, no NaN or Infinity, no integer of
// more than 4300 digits), an EdDSA header naming the issuer's key, claims repeating the
// credential's fields, and a badge image with exactly one credential in it. The signature is
// checked by the browser's own WebCrypto Ed25519 against the issuer key the site was built
// with, and the certificate's ID against the revocation list published with it.
"use strict";
(function () {
  var MAX_TOKEN_CHARS = 64 * 1024;
  var SUMMARY_TYP = "coursekit-summary+jwt";
  var CLOCK_SKEW_S = 5 * 60;
  var MAX_PNG_BYTES = 4 * 1024 * 1024;
  var MAX_INT_DIGITS = 4300; // Python's limit on converting a decimal text to int
  var MAX_DEPTH = 900; // Python's json parser stops at its recursion limit
  var ID = /^CK-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}$/;
  var BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
  // str.strip()'s whitespace (str.isspace), which is not String.prototype.trim's.
  var PY_SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003" +
    "\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";

  function Refused(message) { this.message = message; }
  function refuse(message) { throw new Refused(message); }

  function pyStrip(text, chars) {
    chars = chars || PY_SPACE;
    var start = 0, end = text.length;
    while (start < end && chars.indexOf(text[start]) >= 0) start++;
    while (end > start && chars.indexOf(text[end - 1]) >= 0) end--;
    return text.slice(start, end);
  }

  // --- base64url (keys.py: b64url, b64url_decode) ---
  function b64url(bytes) {
    var text = "";
    for (var i = 0; i < bytes.length; i++) text += String.fromCharCode(bytes[i]);
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function b64urlDecode(text) {
    if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) throw new Error("not base64url");
    var padded = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
    var binary = atob(padded);
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    if (b64url(bytes) !== text) {
      throw new Error("not canonical base64url (unused bits set in its last character)");
    }
    return bytes;
  }

  // --- strict JSON, as Python's json reads it (credentials.py: strict_json) ---
  // Objects become Maps (keys in their order, as a Python dict keeps them).
  function strictJson(bytes) {
    var text;
    try {
      text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
    } catch (error) {
      refuse("the signed data is damaged (not UTF-8 JSON)");
    }
    var at = 0;
    function damaged() { refuse("the signed data is damaged (not UTF-8 JSON)"); }
    function space() { while (at < text.length && " \t\n\r".indexOf(text[at]) >= 0) at++; }
    function literal(word, value) {
      if (text.slice(at, at + word.length) !== word) damaged();
      at += word.length;
      return value;
    }
    function string() {
      at++; // the opening quote
      var out = "";
      for (;;) {
        if (at >= text.length) damaged();
        var ch = text[at];
        if (ch === '"') { at++; return out; }
        if (ch.charCodeAt(0) < 0x20) damaged();
        if (ch !== "\\") { out += ch; at++; continue; }
        var next = text[at + 1];
        var simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
        if (next !== undefined && Object.prototype.hasOwnProperty.call(simple, next)) {
          out += simple[next]; at += 2; continue;
        }
        if (next !== "u" || !/^[0-9A-Fa-f]{4}$/.test(text.slice(at + 2, at + 6))) damaged();
        out += String.fromCharCode(parseInt(text.slice(at + 2, at + 6), 16));
        at += 6;
      }
    }
    function number() {
      var match = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/.exec(text.slice(at));
      if (!match) damaged();
      at += match[0].length;
      if (!match[2] && !match[3] && match[1].length > MAX_INT_DIGITS) damaged();
      return Number(match[0]);
    }
    function value(depth) {
      if (depth > MAX_DEPTH) damaged();
      space();
      var ch = text[at];
      if (ch === "{") {
        at++;
        var object = new Map();
        space();
        if (text[at] === "}") { at++; return object; }
        for (;;) {
          space();
          if (text[at] !== '"') damaged();
          var key = string();
          space();
          if (text[at] !== ":") damaged();
          at++;
          var item = value(depth + 1);
          if (object.has(key)) refuse("the signed data holds the key " + JSON.stringify(key) + " twice");
          object.set(key, item);
          space();
          if (text[at] === ",") { at++; continue; }
          if (text[at] === "}") { at++; return object; }
          damaged();
        }
      }
      if (ch === "[") {
        at++;
        var array = [];
        space();
        if (text[at] === "]") { at++; return array; }
        for (;;) {
          array.push(value(depth + 1));
          space();
          if (text[at] === ",") { at++; continue; }
          if (text[at] === "]") { at++; return array; }
          damaged();
        }
      }
      if (ch === '"') return string();
      if (ch === "t") return literal("true", true);
      if (ch === "f") return literal("false", false);
      if (ch === "n") return literal("null", null);
      if (text.slice(at, at + 3) === "NaN" || text.slice(at, at + 8) === "Infinity" ||
          text.slice(at, at + 9) === "-Infinity") {
        refuse("the signed data holds a constant JSON does not allow");
      }
      return number();
    }
    var result = value(0);
    space();
    if (at !== text.length) damaged();
    if (!(result instanceof Map)) refuse("the signed data is not a JSON object");
    return result;
  }

  // Python's == on JSON values: True == 1, 1 == 1.0, dicts equal whatever their order.
  function pyEqual(a, b) {
    var number = function (v) { return typeof v === "boolean" ? Number(v) : v; };
    if ((typeof a === "number" || typeof a === "boolean") && (typeof b === "number" || typeof b === "boolean")) {
      return number(a) === number(b);
    }
    if (Array.isArray(a) && Array.isArray(b)) {
      return a.length === b.length && a.every(function (v, i) { return pyEqual(v, b[i]); });
    }
    if (a instanceof Map && b instanceof Map) {
      if (a.size !== b.size) return false;
      for (var entry of a) if (!b.has(entry[0]) || !pyEqual(entry[1], b.get(entry[0]))) return false;
      return true;
    }
    return a === b;
  }
  function get(map, key) { return map instanceof Map && map.has(key) ? map.get(key) : undefined; }

  // Python's v[i] and v["key"] on JSON values: anything else is the shape error.
  var SHAPE = "the credential is not shaped as a coursekit certificate";
  function item(v, index) {
    if (Array.isArray(v) && index < v.length) return v[index];
    if (typeof v === "string" && index < Array.from(v).length) return Array.from(v)[index];
    refuse(SHAPE);
  }
  function field(v, key) {
    if (v instanceof Map && v.has(key)) return v.get(key);
    refuse(SHAPE);
  }
  function pyTuple(v) {
    if (Array.isArray(v)) return v.slice();
    if (typeof v === "string") return Array.from(v);
    if (v instanceof Map) return Array.from(v.keys());
    refuse(SHAPE);
  }
  function text(value, what) {
    if (typeof value !== "string") refuse("the credential's " + what + " is missing or not text");
    return value;
  }

  // --- keys.py: did:key, verification_method ---
  function keyOfDidKey(did) {
    if (did.indexOf("did:key:z") !== 0) throw new Error("not a did:key");
    var number = 0n, zeros = 0, leading = true;
    for (var ch of did.slice("did:key:z".length)) {
      var digit = BASE58.indexOf(ch);
      if (digit < 0) throw new Error("not base58");
      if (leading && ch === "1") zeros++; else leading = false;
      number = number * 58n + BigInt(digit);
    }
    var hex = number === 0n ? "" : number.toString(16);
    if (hex.length % 2) hex = "0" + hex;
    var data = new Uint8Array(zeros + hex.length / 2);
    for (var i = 0; i < hex.length / 2; i++) data[zeros + i] = parseInt(hex.substr(2 * i, 2), 16);
    if (data.length !== 34 || data[0] !== 0xed || data[1] !== 0x01) throw new Error("not an Ed25519 did:key");
    return data.slice(2);
  }
  function verificationMethod(issuer) {
    return issuer.indexOf("did:key:") === 0 ? issuer + "#" + issuer.slice(8) : issuer + "#key-1";
  }
  function sameBytes(a, b) {
    return a.length === b.length && a.every(function (v, i) { return v === b[i]; });
  }

  // --- credentials.py: certificate_id (uuid.UUID's parsing) and validFrom (strptime) ---
  function certificateId(credentialId) {
    var hex = credentialId.indexOf("urn:uuid:") === 0 ? credentialId.slice(9) : credentialId;
    hex = pyStrip(hex.split("urn:").join("").split("uuid:").join(""), "{}").split("-").join("");
    if (Array.from(hex).length !== 32) throw new Error("badly formed UUID");
    // int(hex, 16): spaces around, a sign, a 0x prefix, single underscores between digits
    var match = /^([-+]?)(0[xX])?(_?[0-9A-Fa-f](?:_?[0-9A-Fa-f])*)$/.exec(pyStrip(hex));
    if (!match || (!match[2] && match[3][0] === "_")) throw new Error("badly formed UUID");
    var value = BigInt("0x" + match[3].split("_").join(""));
    if (match[1] === "-" && value !== 0n) throw new Error("int is out of range");
    if (value >= 1n << 128n) throw new Error("int is out of range");
    var digits = value.toString(16).padStart(32, "0").toUpperCase();
    return "CK-" + digits.slice(0, 4) + "-" + digits.slice(4, 8) + "-" + digits.slice(8, 12) +
      "-" + digits.slice(20, 24);
  }
  var STAMP = /^(\d\d\d\d)-(1[0-2]|0[1-9]|[1-9])-(3[01]|[12]\d|0[1-9]|[1-9]| [1-9])T(2[0-3]|[0-1]\d|\d):([0-5]\d|\d):(6[0-1]|[0-5]\d|\d)Z/i;
  function stampSeconds(stamp) {
    var m = STAMP.exec(stamp);
    if (!m || m[0].length !== stamp.length) throw new Error("not a stamp");
    var y = +m[1], mo = +m[2], d = +m[3].trim(), h = +m[4], mi = +m[5], s = +m[6];
    var days = [31, (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0 ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if (y < 1 || d > days[mo - 1] || s > 59) throw new Error("not a date");
    var date = new Date(0);
    date.setUTCFullYear(y, mo - 1, d);
    date.setUTCHours(h, mi, s, 0);
    return Math.trunc(date.getTime() / 1000);
  }

  // --- credentials.py: open_credential and _statement ---
  async function signatureHolds(keyBytes, signingInput, signature) {
    var key = await crypto.subtle.importKey("raw", keyBytes, { name: "Ed25519" }, false, ["verify"]);
    try {
      return await crypto.subtle.verify({ name: "Ed25519" }, key, signature,
        new TextEncoder().encode(signingInput));
    } catch (error) {
      return false;
    }
  }

  async function openCredential(token, keyBytes, fingerprint) {
    token = pyStrip(token);
    if (token.length > MAX_TOKEN_CHARS || token.split(".").length !== 3) {
      refuse("this is not a signed credential (a compact JWS)");
    }
    var parts = token.split("."), header, payloadBytes, signature;
    try {
      var headerBytes = b64urlDecode(parts[0]);
      header = strictJson(headerBytes);
      payloadBytes = b64urlDecode(parts[1]);
      signature = b64urlDecode(parts[2]);
    } catch (error) {
      if (error instanceof Refused) throw error;
      refuse("the signed credential is damaged (" + error.message + ")");
    }
    var allowed = ["alg", "kid", "typ"];
    if (get(header, "alg") !== "EdDSA" || Array.from(header.keys()).some(function (k) { return allowed.indexOf(k) < 0; })) {
      refuse("the credential is signed with " + JSON.stringify(get(header, "alg")) +
        "; coursekit certificates are signed with EdDSA (Ed25519) and nothing else is accepted");
    }
    if (!(await signatureHolds(keyBytes, parts[0] + "." + parts[1], signature))) {
      refuse("the signature does not match: the signed data was edited, or another key signed " +
        "it (this check used the key with fingerprint " + fingerprint + ")");
    }
    return statement(header, strictJson(payloadBytes), keyBytes, fingerprint);
  }

  function statement(header, payload, keyBytes, fingerprint) {
    var issuer = get(payload, "issuer");
    var issuerId = text(issuer instanceof Map ? get(issuer, "id") : undefined, "issuer");
    if (issuerId.indexOf("did:key:") === 0) {
      var named;
      try { named = keyOfDidKey(issuerId); } catch (error) {
        refuse("the issuer " + JSON.stringify(issuerId) + " is not an Ed25519 did:key");
      }
      if (!sameBytes(named, keyBytes)) refuse("the issuer named in the credential is another key");
    } else if (issuerId.indexOf("did:web:") !== 0) {
      refuse("the issuer " + JSON.stringify(issuerId) + " is neither a did:key nor a did:web");
    }
    var typ = header.has("typ") ? header.get("typ") : "JWT";
    if (!pyEqual(get(header, "kid"), verificationMethod(issuerId)) || !pyEqual(typ, "JWT")) {
      refuse("the signature's header (kid, typ) does not name the issuer's key");
    }
    var subject = get(payload, "credentialSubject");
    if (!(subject instanceof Map)) refuse("the credential names no recipient");
    var credentialId = text(get(payload, "id"), "id");
    var validFrom = text(get(payload, "validFrom"), "validFrom");
    var nbf, shortId;
    try {
      nbf = stampSeconds(validFrom);
      shortId = certificateId(credentialId);
    } catch (error) {
      refuse("the credential's id or validFrom is not one coursekit writes");
    }
    var expected = [["iss", issuerId], ["jti", credentialId], ["sub", get(subject, "id")], ["nbf", nbf]];
    expected.forEach(function (pair) {
      var claim = get(payload, pair[0]);  // payload.get(): None when absent
      if (claim === undefined) claim = null;
      var value = pair[1] === undefined ? null : pair[1];
      if (!pyEqual(claim, value) || typeof claim === "boolean") {
        refuse("the claim '" + pair[0] + "' does not repeat the credential's field");
      }
    });
    if (nbf > Date.now() / 1000 + CLOCK_SKEW_S) refuse("the credential is not valid before " + validFrom);
    if (payload.has("validUntil") || payload.has("exp")) {
      refuse("the credential carries an expiry coursekit never writes");
    }
    var identity = item(field(subject, "identifier"), 0);
    var name = field(identity, "identityHash");
    var achievement = field(subject, "achievement");
    var score = field(item(field(subject, "result"), 0), "value");
    var modules = pyTuple(field(achievement, "tag"));
    var course = field(achievement, "name");
    if (get(identity, "identityType") !== "name" || get(identity, "hashed") !== false) {
      refuse("the credential names its recipient in a way coursekit never writes");
    }
    text(name, "name"); text(course, "course"); text(score, "score");
    if (!modules.every(function (m) { return typeof m === "string"; })) refuse("the credential's modules are not text");
    var titles = moduleTitles(achievement, modules);
    var issuerName = text(issuer.has("name") ? issuer.get("name") : "", "issuer's name");
    var issuerUrl = text(issuer.has("url") ? issuer.get("url") : "", "issuer's url");
    var percent = Number(score);
    if (!/^-?(0|[1-9][0-9]*)\.[0-9]$/.test(score) || !(percent >= 0 && percent <= 100)) {
      refuse("the credential's score " + JSON.stringify(score) + " is not a percentage");
    }
    if (!ID.test(shortId)) refuse("the credential's id is not one coursekit writes");
    return {
      id: shortId, name: name, course: course, score: score + "%",
      date: Array.from(validFrom).slice(0, 10).join(""), modules: modules.join(", "),
      issuer: issuerId, fingerprint: fingerprint,
      covered: modules.map(function (module, i) {
        return titles[i] ? "module " + module.split("_")[0] + ", " + titles[i] : "module " + module;
      }).join("; "),
      issued_by: issuerName && issuerUrl ? issuerName + " (" + issuerUrl + ")"
        : issuerName || issuerUrl || issuerId,
    };
  }

  // credentials.py: _module_titles (the achievement's module alignments)
  var MODULE_TARGET_TYPE = "ext:CourseModule";
  function moduleTitles(achievement, modules) {
    var alignment = achievement.has("alignment") ? achievement.get("alignment") : [];
    if (!Array.isArray(alignment) || !alignment.every(function (a) { return a instanceof Map; })) {
      refuse("the credential's alignment is not a list of objects");
    }
    var titles = new Map();
    alignment.forEach(function (target) {
      if (!pyEqual(get(target, "targetType"), MODULE_TARGET_TYPE)) return;
      var code = get(target, "targetCode"), title = get(target, "targetName");
      if (typeof code !== "string" || typeof title !== "string") {
        refuse("the credential names a module without its code and title");
      }
      if (modules.indexOf(code) < 0 || titles.has(code)) {
        refuse("the credential's alignment names the module " + JSON.stringify(code) +
          " twice or beside the modules it covers");
      }
      titles.set(code, title);
    });
    return modules.map(function (module) { return titles.has(module) ? titles.get(module) : ""; });
  }

  // --- summary.py: open_summary (the QR code's text) ---
  async function openSummary(token, keyBytes, fingerprint) {
    var parts = pyStrip(token).split(".");
    if (token.length > MAX_TOKEN_CHARS || parts.length !== 3) {
      refuse("this is not a signed certificate summary (a compact JWS)");
    }
    var header, payloadBytes, signature;
    try {
      header = strictJson(b64urlDecode(parts[0]));
      payloadBytes = b64urlDecode(parts[1]);
      signature = b64urlDecode(parts[2]);
    } catch (error) {
      if (error instanceof Refused) throw error;
      refuse("the signed summary is damaged (" + error.message + ")");
    }
    var wanted = new Map([["alg", "EdDSA"], ["typ", SUMMARY_TYP]]);
    if (!pyEqual(header, wanted)) refuse("this is not a coursekit certificate summary");
    if (!(await signatureHolds(keyBytes, parts[0] + "." + parts[1], signature))) {
      refuse("the summary's signature does not match: it was edited, or another key signed it " +
        "(this check used the key with fingerprint " + fingerprint + ")");
    }
    var claims = strictJson(payloadBytes);
    var names = ["iss", "jti", "id", "name", "course", "score", "date", "modules"];
    var keys = Array.from(claims.keys());
    if (keys.length !== names.length || !names.every(function (n) { return claims.has(n); }) ||
        !keys.every(function (k) { return typeof claims.get(k) === "string"; })) {
      refuse("the summary is not shaped as a coursekit certificate's");
    }
    var matching;
    try {
      matching = claims.get("id") === certificateId(claims.get("jti"));
      if (claims.get("iss").indexOf("did:key:") === 0) {
        matching = matching && sameBytes(keyOfDidKey(claims.get("iss")), keyBytes);
      } else if (claims.get("iss").indexOf("did:web:") !== 0) {
        matching = false;
      }
    } catch (error) {
      matching = false;
    }
    if (!matching) refuse("the summary's ID or issuer is not its credential's");
    var fields = {};
    ["id", "name", "course", "score", "date", "modules"].forEach(function (n) { fields[n] = claims.get(n); });
    fields.issuer = claims.get("iss");
    fields.fingerprint = fingerprint;
    return fields;
  }

  function headerText(token) {
    try {
      return new TextDecoder("utf-8", { ignoreBOM: true }).decode(b64urlDecode(pyStrip(token).split(".")[0]));
    } catch (error) {
      return "";
    }
  }

  // --- certificates.py: verify_token; the verdict ---
  async function verifyToken(token, issuer) {
    var keyBytes = b64urlDecode(issuer.key), fields;
    try {
      if (token.split(".").length === 3 && headerText(token).indexOf('"typ":"' + SUMMARY_TYP + '"') >= 0) {
        fields = await openSummary(token, keyBytes, issuer.fingerprint);
      } else {
        fields = await openCredential(token, keyBytes, issuer.fingerprint);
      }
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      return { verdict: "not-genuine", reason: error.message, fields: {} };
    }
    var revoked = Object.prototype.hasOwnProperty.call(issuer.revoked, fields.id) ? issuer.revoked[fields.id] : null;
    if (revoked) {
      return { verdict: "revoked", fields: fields,
        reason: "revoked by the issuer on " + revoked.date + (revoked.reason ? ": " + revoked.reason : "") };
    }
    return { verdict: "genuine", reason: "genuine", fields: fields };
  }

  // --- baking.py: credential_in (the badge PNG) ---
  var PNG = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  var KEYWORD = "openbadgecredential";
  var CLAIM = /open[ \t\n\r\f\v_-]?badge/i;
  var COMPACT_JWS = /[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}/;
  var CRC_TABLE = (function () {
    var table = [];
    for (var n = 0; n < 256; n++) {
      var c = n;
      for (var k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table.push(c >>> 0);
    }
    return table;
  })();
  function crc32(bytes) {
    var c = 0xffffffff;
    for (var i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  }
  function latin1(bytes) {
    var out = "";
    for (var i = 0; i < bytes.length; i += 8192) out += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
    return out;
  }
  function BakingError(message) { this.message = message; }
  function isPng(bytes) { return PNG.every(function (b, i) { return bytes[i] === b; }); }

  function chunks(png) {
    if (png.length > MAX_PNG_BYTES) throw new BakingError("the image is too large to be a badge");
    if (!isPng(png)) throw new BakingError("this is not a PNG image");
    var view = new DataView(png.buffer, png.byteOffset, png.byteLength), at = 8, found = [];
    while (at < png.length) {
      if (at + 12 > png.length) throw new BakingError("the image is cut short");
      var length = view.getUint32(at), end = at + 12 + length;
      if (end > png.length) throw new BakingError("the image is cut short");
      var kind = latin1(png.subarray(at + 4, at + 8)), data = png.subarray(at + 8, at + 8 + length);
      if (view.getUint32(end - 4) !== crc32(png.subarray(at + 4, at + 8 + length))) {
        throw new BakingError("the image's '" + kind + "' chunk is damaged");
      }
      if (at === 8 && kind !== "IHDR") throw new BakingError("the image does not start with its header (IHDR)");
      found.push([kind, data]);
      if (kind === "IEND") {
        if (end !== png.length) throw new BakingError("the image has data after its end (IEND)");
        return found;
      }
      at = end;
    }
    throw new BakingError("the image has no end (IEND)");
  }

  async function inflate(data) {
    // zlib.decompressobj().decompress(data, MAX_PNG_BYTES); a stream that does not end
    // cleanly is refused here (Python would read what it can: this check is the stricter).
    if (!data.length) return new Uint8Array(0); // nothing to inflate: no error in zlib either
    var reader = new Blob([data]).stream().pipeThrough(new DecompressionStream("deflate")).getReader();
    var parts = [], size = 0;
    try {
      for (;;) {
        var step = await reader.read();
        if (step.done) break;
        parts.push(step.value);
        size += step.value.length;
        if (size >= MAX_PNG_BYTES) { reader.cancel(); break; }
      }
    } catch (error) {
      throw new BakingError("a compressed text chunk of the image is damaged");
    }
    var out = new Uint8Array(Math.min(size, MAX_PNG_BYTES)), at = 0;
    parts.forEach(function (part) {
      var room = out.length - at;
      if (room > 0) { out.set(part.subarray(0, room), at); at += Math.min(room, part.length); }
    });
    return out;
  }
  function indexOfZero(bytes, from) {
    for (var i = from || 0; i < bytes.length; i++) if (bytes[i] === 0) return i;
    return -1;
  }
  function splitZero(bytes, max) { // bytes.split(b"\0", max)
    var parts = [], start = 0;
    while (parts.length < max) {
      var at = indexOfZero(bytes, start);
      if (at < 0) break;
      parts.push(bytes.subarray(start, at));
      start = at + 1;
    }
    parts.push(bytes.subarray(start));
    return parts;
  }
  async function textOf(kind, data) {
    var zero = indexOfZero(data), keyword = zero < 0 ? data : data.subarray(0, zero);
    var rest = zero < 0 ? new Uint8Array(0) : data.subarray(zero + 1);
    if (kind === "tEXt") return [keyword, rest];
    if (kind === "zTXt") return [keyword, await inflate(rest.subarray(1))];
    var compressed = rest.length > 0 && rest[0] === 1;
    var parts = splitZero(rest.subarray(2), 2);
    var body = parts.length === 3 ? parts[2] : new Uint8Array(0);
    return [keyword, compressed ? await inflate(body) : body];
  }

  async function credentialIn(png) {
    var found = [];
    for (var pair of chunks(png)) {
      var kind = pair[0], data = pair[1];
      if (kind === "iTXt" && latin1(data.subarray(0, KEYWORD.length + 1)) === KEYWORD + "\0") {
        var rest = data.subarray(KEYWORD.length + 1);
        if (rest.length < 2 || rest[0] !== 0) {
          throw new BakingError("the baked credential is compressed, which Open Badges forbids");
        }
        var parts = splitZero(rest.subarray(2), 2);
        if (parts.length !== 3) throw new BakingError("the baked credential is damaged");
        try {
          found.push(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(parts[2]));
        } catch (error) {
          throw new BakingError("the baked credential is damaged");
        }
        continue;
      }
      var claims = CLAIM.test(kind + latin1(data));
      if (["tEXt", "zTXt", "iTXt"].indexOf(kind) >= 0) {
        var text = await textOf(kind, data);
        claims = claims || CLAIM.test(latin1(text[0]) + latin1(text[1])) || COMPACT_JWS.test(latin1(text[1]));
      }
      if (claims) {
        throw new BakingError("the image has a '" + kind + "' chunk that claims to hold a badge " +
          "credential beside the one a badge may hold: it is not a genuine coursekit badge");
      }
    }
    if (found.length > 1) throw new BakingError("the image holds two credentials; a badge holds one");
    if (!found.length) throw new BakingError("the image holds no baked credential (no openbadgecredential chunk)");
    return found[0];
  }

  // --- what the person gave, told apart as coursekit verify does (certificate_input.py) ---
  var EXPECTED = "give a certificate's credential (.jwt or .json) or badge (.png), or the text " +
    "of its QR code";
  var ENVELOPED_PREFIX = "data:application/vc+jwt,";
  function notGenuine(reason) { return { verdict: "not-genuine", reason: reason, fields: {} }; }
  function joined(text) { // whitespace inside a token copied across lines is none of its own
    return Array.from(text).filter(function (ch) { return PY_SPACE.indexOf(ch) < 0; }).join("");
  }
  function isJws(text) { // three base64url parts, the first a JSON object (the JOSE header)
    if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(text)) return false;
    try {
      var header = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })
        .decode(b64urlDecode(text.split(".")[0])));
      return header !== null && typeof header === "object" && !Array.isArray(header);
    } catch (error) {
      return false;
    }
  }
  var ID_AND_FINGERPRINT = new RegExp("^(CK-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4})[" +
    PY_SPACE + "]+([^" + PY_SPACE + "]+)$");
  var WEB_ADDRESS = new RegExp("^[A-Za-z][A-Za-z0-9+.-]*://[^" + PY_SPACE + "]*$");
  function isCertificateText(text) {
    return isJws(joined(text)) || ID_AND_FINGERPRINT.test(text) || WEB_ADDRESS.test(text);
  }
  async function fromText(text, issuer) {
    if (isJws(joined(text))) return verifyToken(joined(text), issuer);
    var found = ID_AND_FINGERPRINT.exec(text);
    if (found) {
      return notGenuine("this is the QR code of certificate " + found[1] + ", whose name was " +
        "too long for a signed summary: it holds the certificate's ID and its issuer key's " +
        "fingerprint alone, which nothing signs. Check the certificate's .jwt or .png file instead");
    }
    if (WEB_ADDRESS.test(text)) {
      return notGenuine("this is a web address; a coursekit certificate's QR code holds its " +
        "signed summary itself, text that begins with eyJ");
    }
    return notGenuine("this is no certificate: " + EXPECTED);
  }
  async function tokenInJson(text, issuer) {
    var value;
    try { value = JSON.parse(text); } catch (error) { return notGenuine("this is not valid JSON: " + EXPECTED); }
    var isObject = value !== null && typeof value === "object" && !Array.isArray(value);
    var kinds = isObject ? value.type : undefined;
    kinds = typeof kinds === "string" ? [kinds] : Array.isArray(kinds) ? kinds : [];
    if (isObject && kinds.indexOf("EnvelopedVerifiableCredential") >= 0) {
      value = Object.prototype.hasOwnProperty.call(value, "id") ? value.id : null;
      if (typeof value === "string" && value.indexOf(ENVELOPED_PREFIX) === 0) {
        value = value.slice(ENVELOPED_PREFIX.length);
      }
    }
    if (typeof value === "string" && isJws(pyStrip(value))) return verifyToken(pyStrip(value), issuer);
    if (value !== null && typeof value === "object" && !Array.isArray(value) &&
        Object.prototype.hasOwnProperty.call(value, "credentialSubject")) {
      return notGenuine("this is a credential's JSON without its signature: coursekit signs " +
        "credentials as a JWT; check the .jwt file beside the certificate's page");
    }
    return notGenuine("this is JSON that holds no signed credential");
  }
  async function verifyText(text, issuer) {
    if (!pyStrip(text)) return notGenuine("there is nothing to check: " + EXPECTED);
    if (text.indexOf('id="coursekit-credential"') >= 0 || text.indexOf('id="coursekit-certificate"') >= 0) {
      return { verdict: "not-checked", fields: {},
        reason: "this is a certificate page (.html): check it with coursekit verify, which also " +
          "checks what the page shows; or paste the .jwt file or the QR code's text here" };
    }
    var stripped = pyStrip(text);
    if (stripped[0] === "{" || stripped[0] === '"') return tokenInJson(stripped, issuer);
    if (isCertificateText(stripped)) return fromText(stripped, issuer);
    return notGenuine("this is not a coursekit certificate (no signed data in it)");
  }
  async function verifyBytes(bytes, issuer) {
    if (isPng(bytes)) {
      try {
        return await verifyToken(await credentialIn(bytes), issuer);
      } catch (error) {
        if (!(error instanceof BakingError)) throw error;
        return notGenuine(error.message);
      }
    }
    var text;
    try {  // as bytes.decode("utf-8"): a byte-order mark stays
      text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
    } catch (error) {
      return notGenuine("this is not a certificate (neither text nor a PNG badge)");
    }
    return verifyText(text, issuer);
  }

  // text.py's visible(): what does not show as itself is written as its escape.
  var INVISIBLE = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069" +
    "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad\u034f\u115f\u1160\u3164\uffa0";
  var UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
  function visible(value) {
    var out = "";
    for (var ch of String(value)) {
      if (ch !== " " && (INVISIBLE.indexOf(ch) >= 0 || UNPRINTABLE.test(ch))) {
        var code = ch.codePointAt(0);
        var named = { 9: "\\t", 10: "\\n", 13: "\\r" }[code];
        out += named || (code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0")
          : code < 0x10000 ? "\\u" + code.toString(16).padStart(4, "0")
          : "\\U" + code.toString(16).padStart(8, "0"));
      } else {
        out += ch;
      }
    }
    return out;
  }

  var WORDS = { genuine: "Genuine", revoked: "Revoked", "not-genuine": "Not genuine", "not-checked": "Not checked here" };
  var LABELS = [["name", "Student"], ["course", "Course"], ["covered", "Modules"], ["modules", "Modules"],
    ["score", "Score"], ["date", "Date"], ["id", "Certificate ID"], ["issued_by", "Issued by"],
    ["issuer", "Issuer"], ["fingerprint", "Issuer key fingerprint"]];
  function show(result) {
    var box = document.getElementById("verdict");
    box.className = result.verdict;
    box.querySelector(".verdict-word").textContent = WORDS[result.verdict];
    box.querySelector(".verdict-reason").textContent =
      result.verdict === "genuine" ? "Signed by this course's issuer key, unedited, and not revoked."
        : visible(result.reason.charAt(0).toUpperCase() + result.reason.slice(1)) + ".";
    var list = box.querySelector(".verdict-fields");
    list.textContent = "";
    LABELS.forEach(function (label) {
      if (result.fields[label[0]] === undefined) return;
      if (label[0] === "modules" && result.fields.covered !== undefined) return;
      var term = document.createElement("dt"), detail = document.createElement("dd");
      term.textContent = label[1];
      detail.textContent = visible(result.fields[label[0]]);
      detail.dataset.field = label[0];
      list.appendChild(term);
      list.appendChild(detail);
    });
    box.hidden = false;
  }

  var issuerElement = document.getElementById("issuer");
  var issuer = issuerElement ? JSON.parse(issuerElement.textContent) : null;
  // For tests and the curious: the same checks, callable from the console.
  window.coursekitVerify = { verifyText: verifyText, verifyBytes: verifyBytes, issuer: issuer };
  if (!issuer || !issuer.key) return;
  if (!window.isSecureContext || !crypto.subtle) {
    show({ verdict: "not-checked", fields: {}, reason: "this browser offers no WebCrypto here (open the page over https)" });
    return;
  }
  async function run(work) {
    try {
      show(await work());
    } catch (error) {
      show({ verdict: "not-checked", fields: {},
        reason: "this browser could not check an Ed25519 signature (" + error.message + "); " +
          "use a current browser, or coursekit verify" });
    }
  }
  document.getElementById("verify-button").addEventListener("click", function () {
    run(function () { return verifyText(document.getElementById("certificate-text").value, issuer); });
  });
  function readFile(file) {
    run(async function () { return verifyBytes(new Uint8Array(await file.arrayBuffer()), issuer); });
  }
  document.getElementById("certificate-file").addEventListener("change", function (event) {
    if (event.target.files.length) readFile(event.target.files[0]);
  });
  var zone = document.getElementById("drop-zone");
  zone.addEventListener("dragover", function (event) { event.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", function () { zone.classList.remove("over"); });
  zone.addEventListener("drop", function (event) {
    event.preventDefault();
    zone.classList.remove("over");
    if (event.dataTransfer.files.length) readFile(event.dataTransfer.files[0]);
  });
})();
