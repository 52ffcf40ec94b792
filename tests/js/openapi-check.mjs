// Validates an OpenAPI 3.1 document against the official OpenAPI 3.1 JSON Schema
// (@seriousme/openapi-schema-validator), then real responses against the schemas the document gives them
// (Ajv, JSON Schema 2020-12, formats checked). Independent of the Rust code that wrote the document.
//
//   node openapi-check.mjs INPUT.json
//
// INPUT: {"document": {...}, "samples": [{"name", "path", "method", "status", "contentType", "body"}]}.
// Prints one line per check; exits 1 on the first failure with the validator's errors.
import { readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const doc = input.document;

const fail = (what, errors) => {
  console.error(`FAIL ${what}\n${JSON.stringify(errors, null, 2)}`);
  process.exit(1);
};

const validator = new Validator();
const result = await validator.validate(structuredClone(doc));
if (!result.valid) fail("document is not valid OpenAPI", result.errors);
if (validator.version !== "3.1") fail("document version", { version: validator.version });
console.log(`ok document: valid OpenAPI ${validator.version}`);

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
// OpenAPI's own format names (annotations in 3.1): known, not checked beyond their type.
for (const f of ["int32", "int64", "float", "double", "binary", "byte", "password"]) ajv.addFormat(f, true);
ajv.addSchema({ $id: "https://openapi.invalid/document.json", components: doc.components ?? {} });

for (const s of input.samples) {
  const op = doc.paths?.[s.path]?.[s.method];
  if (!op) fail(`${s.name}: no operation ${s.method.toUpperCase()} ${s.path}`, {});
  const response = op.responses?.[String(s.status)];
  if (!response) fail(`${s.name}: ${s.path} documents no ${s.status} response`, Object.keys(op.responses ?? {}));
  const schema = response.content?.[s.contentType]?.schema;
  if (!schema) fail(`${s.name}: ${s.status} of ${s.path} has no ${s.contentType} schema`, response);
  // Resolve #/components/... against the document.
  const rooted = JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"https://openapi.invalid/document.json#/components/'));
  const validate = ajv.compile(rooted);
  if (!validate(s.body)) fail(`${s.name}: ${s.status} body does not match its schema`, validate.errors);
  for (const h of s.headers ?? []) {
    if (!response.headers?.[h]) fail(`${s.name}: header ${h} is sent but not documented`, response.headers ?? {});
  }
  console.log(`ok ${s.name}: ${s.method.toUpperCase()} ${s.path} ${s.status} ${s.contentType}`);
}
console.log(`ok: the document and ${input.samples.length} answers`);
