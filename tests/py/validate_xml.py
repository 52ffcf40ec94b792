"""Validates an XML document against an XSD 1.1 schema; prints {"valid": bool, "errors": [...]} as JSON.

Usage: python validate_xml.py SCHEMA.xsd DOCUMENT.xml
"""
import json
import sys

import xmlschema

schema = xmlschema.XMLSchema11(sys.argv[1])
errors = [str(e.reason or e) for e in schema.iter_errors(sys.argv[2])]
print(json.dumps({"valid": not errors, "errors": errors[:5]}))
