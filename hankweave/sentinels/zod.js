// A `z` of hankweave's own: Zod 3's schema builders, building the JSON Schema (draft 2020-12
// vocabulary) a sentinel's structured answer is checked against.  Loaded into the sandbox
// (hankweave/sentinels/js.py) before a schema's code runs; see hankweave/sentinels/zod.py.
//
// A builder or method that JSON Schema cannot express (refinements, transforms, formats
// whose check would silently vanish) throws `unsupported Zod construct ...`, naming it.
var __hankweave_zod = (function () {
  "use strict";
  const fail = (message, hint) => {
    const e = new Error(message); e.problem = message; e.hint = hint || ""; throw e;
  };
  const copy = (value) => JSON.parse(JSON.stringify(value));
  const unsupported = (name, on) => fail(`unsupported Zod construct \`${name}\``,
    on ? `supported on ${on}` : `supported: ${TYPES}`);
  const TYPES = "z.object, z.string, z.number, z.boolean, z.null, z.any, z.unknown, z.array, " +
    "z.enum, z.literal, z.union, z.discriminatedUnion, z.record, z.optional, z.nullable";
  const COMMON = ["optional", "nullable", "nullish", "describe", "default", "array", "or"];
  const description = (params) =>
    params && typeof params === "object" && typeof params.description === "string"
      ? { description: params.description } : {};
  const nonNegativeInteger = (name, n) => (Number.isInteger(n) && n >= 0) ? n :
    fail(`.${name}() takes a non-negative integer, not ${JSON.stringify(n)}`);
  const finite = (name, n) => (typeof n === "number" && Number.isFinite(n)) ? n :
    fail(`.${name}() takes a number, not ${JSON.stringify(n)}`);

  function nullableJson(json) {
    if (json.type === "null") return json;
    const plain = typeof json.type === "string" && !("enum" in json) && !("const" in json) &&
      !("anyOf" in json);
    if (plain) return { ...json, type: [json.type, "null"] };
    if (Array.isArray(json.type)) return json.type.includes("null") ? json :
      { ...json, type: [...json.type, "null"] };
    const { description: said, ...inner } = json;
    return { anyOf: [inner, { type: "null" }], ...(said === undefined ? {} : { description: said }) };
  }

  class Schema {
    constructor(kind, json, extra) {
      this._kind = kind; this._json = json; this._optional = false;
      Object.assign(this, extra || {});
    }
    _with(update) {
      const next = Object.create(Object.getPrototypeOf(this));
      Object.assign(next, this, update);
      return next;
    }
    toJSONSchema() { return copy(this._json); }
    _methods() { return (this._own || []).concat(COMMON); }
    optional() { return this._with({ _optional: true }); }
    nullable() { return this._with({ _json: nullableJson(this.toJSONSchema()), _nullable: true }); }
    nullish() { return this.nullable().optional(); }
    describe(text) { return this._with({ _json: { ...this.toJSONSchema(), description: String(text) } }); }
    default(value) {
      return this._with({ _optional: true, _json: { ...this.toJSONSchema(), default: copy(value) } });
    }
    array() { return z.array(this); }
    or(other) { return z.union([this, other]); }
  }
  // Everything else Zod has is named when called: a refinement or transform cannot be
  // checked by a JSON Schema, a format would be an annotation only.
  const UNSUPPORTED_METHODS = ["refine", "superRefine", "transform", "pipe", "catch", "brand",
    "and", "merge", "pick", "omit", "required", "deepPartial", "keyof", "email", "url", "uuid",
    "cuid", "cuid2", "ulid", "datetime", "date", "time", "ip", "emoji", "regex", "includes",
    "startsWith", "endsWith", "trim", "toLowerCase", "toUpperCase", "safe", "readonly",
    "promise", "base64", "nanoid", "duration", "cidr", "jwt"];
  const CHECKS = ["min", "max", "length", "nonempty", "int", "gte", "lte", "gt", "lt",
    "positive", "negative", "nonnegative", "nonpositive", "multipleOf", "step", "finite",
    "strict", "strip", "passthrough", "catchall", "extend", "partial"];
  for (const name of UNSUPPORTED_METHODS.concat(CHECKS)) {
    if (!(name in Schema.prototype)) {
      Schema.prototype[name] = function () {
        unsupported("." + name, `${this._label}: .` + this._methods().join(", ."));
      };
    }
  }

  class Str extends Schema {
    get _label() { return "z.string()"; }
    get _own() { return ["min", "max", "length", "nonempty"]; }
    min(n) { return this._bound({ minLength: nonNegativeInteger("min", n) }); }
    max(n) { return this._bound({ maxLength: nonNegativeInteger("max", n) }); }
    length(n) { n = nonNegativeInteger("length", n); return this._bound({ minLength: n, maxLength: n }); }
    nonempty() { return this._bound({ minLength: 1 }); }
  }
  Str.prototype._bound = function (update) {
    if (this._nullable || this._optional)
      unsupported("." + boundName(update), `${this._label} before .optional() and .nullable()`);
    return this._with({ _json: { ...this.toJSONSchema(), ...update } });
  };
  const boundName = (update) => ({ minLength: "min", maxLength: "max", minItems: "min",
    maxItems: "max", minimum: "min", maximum: "max", exclusiveMinimum: "gt",
    exclusiveMaximum: "lt", multipleOf: "multipleOf", type: "int" })[Object.keys(update)[0]] ||
    Object.keys(update)[0];

  class Num extends Schema {
    get _label() { return "z.number()"; }
    get _own() { return ["int", "min", "max", "gte", "lte", "gt", "lt", "positive", "negative",
      "nonnegative", "nonpositive", "multipleOf", "step", "finite"]; }
    int() { return this._bound({ type: "integer" }); }
    min(n) { return this._bound({ minimum: finite("min", n) }); }
    gte(n) { return this._bound({ minimum: finite("gte", n) }); }
    max(n) { return this._bound({ maximum: finite("max", n) }); }
    lte(n) { return this._bound({ maximum: finite("lte", n) }); }
    gt(n) { return this._bound({ exclusiveMinimum: finite("gt", n) }); }
    lt(n) { return this._bound({ exclusiveMaximum: finite("lt", n) }); }
    positive() { return this._bound({ exclusiveMinimum: 0 }); }
    negative() { return this._bound({ exclusiveMaximum: 0 }); }
    nonnegative() { return this._bound({ minimum: 0 }); }
    nonpositive() { return this._bound({ maximum: 0 }); }
    multipleOf(n) { return (typeof n === "number" && n > 0) ? this._bound({ multipleOf: n }) :
      fail(`.multipleOf() takes a positive number, not ${JSON.stringify(n)}`); }
    step(n) { return this.multipleOf(n); }
    finite() { return this; }
  }
  Num.prototype._bound = Str.prototype._bound;

  class Arr extends Schema {
    get _label() { return "z.array()"; }
    get _own() { return ["min", "max", "length", "nonempty"]; }
    min(n) { return this._bound({ minItems: nonNegativeInteger("min", n) }); }
    max(n) { return this._bound({ maxItems: nonNegativeInteger("max", n) }); }
    length(n) { n = nonNegativeInteger("length", n); return this._bound({ minItems: n, maxItems: n }); }
    nonempty() { return this._bound({ minItems: 1 }); }
  }
  Arr.prototype._bound = Str.prototype._bound;

  class Obj extends Schema {
    constructor(shape, params) {
      super("object", null, { _shape: shape, _extra: false, _params: description(params) });
    }
    get _label() { return "z.object()"; }
    get _own() { return ["strict", "strip", "passthrough", "catchall", "extend", "partial"]; }
    toJSONSchema() {
      if (this._json) return copy(this._json);
      const properties = {}, required = [];
      for (const [key, value] of Object.entries(this._shape)) {
        properties[key] = value.toJSONSchema();
        if (!value._optional) required.push(key);
      }
      const json = { type: "object", properties, required };
      if (this._extra === false) json.additionalProperties = false;
      else if (this._extra !== true) json.additionalProperties = this._extra.toJSONSchema();
      return { ...json, ...this._params };
    }
    _object(update) { if (this._json) unsupported("." + Object.keys(update)[0], "z.object() before .nullable() and .describe()"); return this._with(update); }
    strict() { return this._object({ _extra: false }); }
    strip() { return this._object({ _extra: false }); }
    passthrough() { return this._object({ _extra: true }); }
    catchall(schema) { return this._object({ _extra: schemaOf(schema, ".catchall()") }); }
    extend(shape) { return this._object({ _shape: { ...this._shape, ...shapeOf(shape) } }); }
    partial() {
      const shape = {};
      for (const [key, value] of Object.entries(this._shape)) shape[key] = value.optional();
      return this._object({ _shape: shape });
    }
  }

  const schemaOf = (value, where) => value instanceof Schema ? value :
    fail(`${where} takes a Zod schema, not ${value === undefined ? "undefined" : JSON.stringify(value)}`);
  const shapeOf = (shape) => {
    if (shape === null || typeof shape !== "object" || Array.isArray(shape) || shape instanceof Schema)
      fail("z.object() takes an object of Zod schemas");
    for (const [key, value] of Object.entries(shape)) schemaOf(value, `key \`${key}\``);
    return shape;
  };
  const simple = (json, label) => (params) => Object.assign(
    new Schema(label, { ...json, ...description(params) }), { _label: label });

  const z = {
    string: (params) => new Str("string", { type: "string", ...description(params) }),
    number: (params) => new Num("number", { type: "number", ...description(params) }),
    boolean: simple({ type: "boolean" }, "z.boolean()"),
    null: simple({ type: "null" }, "z.null()"),
    any: simple({}, "z.any()"),
    unknown: simple({}, "z.unknown()"),
    object: (shape, params) => new Obj(shapeOf(shape), params),
    array: (item, params) => new Arr("array", {
      type: "array", items: schemaOf(item, "z.array()").toJSONSchema(), ...description(params) }),
    enum: (values, params) => {
      if (!Array.isArray(values) || !values.length || values.some((v) => typeof v !== "string"))
        fail("z.enum() takes a non-empty list of strings");
      return Object.assign(new Schema("enum", { type: "string", enum: [...values], ...description(params) }),
        { _label: "z.enum()" });
    },
    literal: (value, params) => {
      const kind = value === null ? "null" : typeof value;
      if (!["string", "number", "boolean", "null"].includes(kind))
        fail("z.literal takes a string, number, boolean or null");
      const json = kind === "null" ? { type: "null" } : { type: kind, const: value };
      return Object.assign(new Schema("literal", { ...json, ...description(params) }), { _label: "z.literal()" });
    },
    union: (options, params) => {
      if (!Array.isArray(options) || !options.length) fail("z.union() takes at least one option");
      const any = [];
      for (const option of options) {
        const schema = schemaOf(option, "z.union()");
        if (schema._union && !schema._nullable) any.push(...schema.toJSONSchema().anyOf);
        else any.push(schema.toJSONSchema());
      }
      return Object.assign(new Schema("union", { anyOf: any, ...description(params) }), {
        _label: "z.union()", _union: true, _optional: options.some((o) => o._optional) });
    },
    discriminatedUnion: (key, options, params) => {
      if (!Array.isArray(options) || !options.length || options.some((o) => !(o instanceof Obj)))
        fail("z.discriminatedUnion() takes a list of z.object schemas");
      return Object.assign(new Schema("union", {
        anyOf: options.map((o) => o.toJSONSchema()), ...description(params) }), { _label: "z.discriminatedUnion()" });
    },
    record: (first, second, params) => {
      const [keys, values] = second instanceof Schema ? [first, second] : [null, first];
      const json = { type: "object", additionalProperties: schemaOf(values, "z.record()").toJSONSchema() };
      if (keys !== null) {
        const key = schemaOf(keys, "z.record()").toJSONSchema();
        if (key.type !== "string") fail("z.record(): record keys must be z.string() or z.enum()");
        if (key.enum) json.propertyNames = key;
      }
      const extra = second instanceof Schema ? params : second;
      return Object.assign(new Schema("record", { ...json, ...description(extra) }), { _label: "z.record()" });
    },
    optional: (schema) => schemaOf(schema, "z.optional()").optional(),
    nullable: (schema) => schemaOf(schema, "z.nullable()").nullable(),
  };
  for (const name of ["lazy", "tuple", "intersection", "date", "bigint", "nativeEnum", "custom",
    "function", "instanceof", "promise", "map", "set", "symbol", "undefined", "void", "never",
    "nan", "preprocess", "effect"]) {
    z[name] = () => unsupported("z." + name, null);
  }
  Object.defineProperty(z, "coerce", { get: () => unsupported("z.coerce") });
  const fresh = Object.freeze(Object.assign(Object.create(null), { z, Schema, TYPES }));
  return fresh;
})();
