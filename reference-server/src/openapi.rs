//! The OpenAPI 3.1.0 document of interface A (content licensing), served at `/openapi.json`.

use serde_json::{Value, json};

use crate::config::PaymentNetwork;

/// Build the document for a server reachable at `public_url` selling in `payment`.
pub fn licensing_openapi(public_url: &str, payment: &PaymentNetwork) -> Value {
    let b64_header = |desc: &str| json!({"description": desc, "schema": {"type": "string", "contentEncoding": "base64"}});
    let error = json!({"$ref": "#/components/schemas/Error"});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Content licensing (x402)",
            "version": "2.0",
            "description": format!(
                "Articles sold per request for USDC with the x402 protocol (exact scheme, EIP-3009) on {} \
                 (token {} `{}` version `{}`). An unpaid request is answered 402 with the payment requirements; \
                 the client signs a transferWithAuthorization and repeats the request with `PAYMENT-SIGNATURE` \
                 (x402 v2) or `X-PAYMENT` (x402 v1).",
                payment.caip2(), payment.token.address, payment.token.name, payment.token.version
            ),
        },
        "servers": [{"url": public_url}],
        "paths": {
            "/x402Article/list": {
                "get": {
                    "operationId": "listArticles",
                    "summary": "The catalog of published articles (free).",
                    "responses": {
                        "200": {
                            "description": "Published articles, newest first.",
                            "content": {"application/json": {"schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/CatalogEntry"}
                            }}}
                        }
                    }
                }
            },
            "/x402Article": {
                "get": {
                    "operationId": "getArticle",
                    "summary": "One article, sold at its own price.",
                    "parameters": [
                        {"name": "articleId", "in": "query", "required": true, "schema": {"type": "string"},
                         "description": "An `id` from the catalog."},
                        {"name": "PAYMENT-SIGNATURE", "in": "header", "required": false,
                         "description": "x402 v2: Base64 of the JSON PaymentPayload (signed EIP-3009 authorization).",
                         "schema": {"type": "string", "contentEncoding": "base64"}},
                        {"name": "X-PAYMENT", "in": "header", "required": false,
                         "description": "x402 v1: Base64 of the JSON PaymentPayload.",
                         "schema": {"type": "string", "contentEncoding": "base64"}}
                    ],
                    "responses": {
                        "200": {
                            "description": "Paid: the article and its license receipt.",
                            "headers": {
                                "PAYMENT-RESPONSE": b64_header("x402 v2 settlement response (when paid with PAYMENT-SIGNATURE)."),
                                "X-PAYMENT-RESPONSE": b64_header("x402 v1 settlement response (when paid with X-PAYMENT).")
                            },
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PaidArticle"}}}
                        },
                        "400": {"description": "`articleId` missing or too long.",
                                "content": {"application/json": {"schema": error}}},
                        "404": {"description": "No published article has this id (never a 402).",
                                "content": {"application/json": {"schema": error}}},
                        "402": {
                            "description": "Payment required, or the payment sent is invalid (the body's `error` says why).",
                            "headers": {
                                "X-Payment-Required": b64_header("Base64 of the JSON PaymentRequired document (x402 v2 shape)."),
                                "PAYMENT-REQUIRED": b64_header("The same document, under the x402 v2 header name."),
                                "Cache-Control": {"schema": {"type": "string", "const": "no-store"}}
                            },
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/PaymentRequiredV1"}},
                                "text/html": {
                                    "description": "A paywall page, for a request whose Accept prefers text/html (a browser).",
                                    "schema": {"type": "string"}
                                }
                            }
                        },
                        "503": {"description": "The replay guard is full or failing; retry later.",
                                "content": {"application/json": {"schema": {"type": "object"}}}},
                        "502": {"description": "The facilitator failed or answered garbage.",
                                "content": {"application/json": {"schema": {"type": "object"}}}}
                    }
                }
            },
            "/serveLlmsTxt": {
                "get": {
                    "operationId": "serveLlmsTxt",
                    "summary": "Licensing instructions for machines (llms.txt). Each request is recorded as interest in licensing.",
                    "responses": {"200": {"description": "Plain-text instructions.",
                                          "content": {"text/plain": {"schema": {"type": "string"}}}}}
                }
            },
            "/receipts/{tokenId}": {
                "get": {
                    "operationId": "verifyReceipt",
                    "summary": "A license receipt as stored (the `verifyUrl` of a paid answer).",
                    "parameters": [{"name": "tokenId", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "The receipt.",
                                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Receipt"}}}},
                        "404": {"description": "No such receipt.", "content": {"application/json": {"schema": error}}}
                    }
                }
            },
            "/receipts/{tokenId}/certificate": {
                "get": {
                    "operationId": "receiptCertificate",
                    "summary": "A human-readable HTML license certificate (the `certificate.url` of a paid answer).",
                    "parameters": [{"name": "tokenId", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "The certificate.", "content": {"text/html": {"schema": {"type": "string"}}}},
                        "404": {"description": "No such receipt.", "content": {"application/json": {"schema": error}}}
                    }
                }
            }
        },
        "components": {"schemas": {
            "CatalogEntry": {
                "type": "object",
                "required": ["id", "title", "excerpt", "published_date", "price_amount"],
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "excerpt": {"type": "string"},
                    "published_date": {"type": "string", "format": "date"},
                    "price_amount": {"type": "number", "description": "Price in USDC."}
                }
            },
            "PaidArticle": {
                "type": "object",
                "required": ["article", "receipt"],
                "properties": {
                    "article": {"type": "object", "required": ["title", "content", "author_name"], "properties": {
                        "title": {"type": "string"}, "content": {"type": "string"}, "author_name": {"type": "string"}
                    }},
                    "receipt": {"type": "object", "required": ["nft", "certificate"], "properties": {
                        "nft": {"type": "object", "required": ["tokenId", "verifyUrl"], "properties": {
                            "tokenId": {"type": "string"}, "verifyUrl": {"type": "string", "format": "uri"}
                        }},
                        "certificate": {"type": "object", "required": ["url"], "properties": {
                            "url": {"type": "string", "format": "uri"}
                        }}
                    }}
                }
            },
            "Receipt": {
                "type": "object",
                "required": ["tokenId", "articleId", "articleTitle", "payer", "payTo", "amount", "amountUsdc",
                             "network", "asset", "nonce", "x402Version", "settlement", "issuedAt", "certificateUrl"],
                "properties": {
                    "tokenId": {"type": "string"},
                    "articleId": {"type": "string"},
                    "articleTitle": {"type": "string"},
                    "payer": {"type": "string"},
                    "payTo": {"type": "string"},
                    "amount": {"type": "string", "description": "Atomic units of the token."},
                    "amountUsdc": {"type": "number"},
                    "network": {"type": "string", "description": "CAIP-2."},
                    "asset": {"type": "string"},
                    "nonce": {"type": "string"},
                    "x402Version": {"type": "integer"},
                    "settlement": {"type": "string", "description": "Transaction hash, or `verify-only`."},
                    "issuedAt": {"type": "string", "format": "date-time"},
                    "certificateUrl": {"type": "string", "format": "uri"}
                }
            },
            "PaymentRequiredV1": {
                "type": "object",
                "required": ["x402Version", "error", "accepts"],
                "properties": {
                    "x402Version": {"type": "integer", "const": 1},
                    "error": {"type": "string"},
                    "accepts": {"type": "array", "items": {"type": "object"}}
                }
            },
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {"type": "string"},
                    "detail": {"type": "string"},
                    "request_id": {"type": "string", "description": "The request's x-request-id, to quote when reporting the error."}
                }
            }
        }}
    })
}
