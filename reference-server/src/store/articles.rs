//! Query layer for interface A: articles, license receipts, llms.txt hits.
