"""WAL pages a durable purchase writes, by b-tree: a model of the reference server's SQLite writes.

What it models: the licensing tables as migrations 0001-0010 leave them (only the columns a purchase
writes; `settlements` without the reconciliation columns, which a settled purchase leaves NULL), 8 KiB
pages, and the server's group commit at 32 connections: each commit carries G reservations (INSERT into
payment_states) and the settle-phase writes of the previous G purchases (the record UPDATEd to settled,
a `settlements` row, a `receipts` row). After each commit it reads how many WAL frames were appended; at
the end it maps the frames of the second half of the run to their b-trees with `dbstat`.

Variants: the payment payload's size (4300: an official client's payment with the 402's echoed
extensions; 1100: without them, as records keep it now), and `merged`: the receipt's columns
in the payment record instead of a `receipts` row (one write per purchase).

Run: python3 bench/sqlite-pages/model.py   (G=16 by default; G=8 python3 ... for smaller commits)
Figures it gave, and what they decided: docs/bench/reference-server-licensing.md, "What a purchase writes".
Python's sqlite3 module only, no network; bounded: 4,000 purchases per variant, in a temporary directory
removed at the end.
"""
import collections
import os
import random
import sqlite3
import struct
import shutil
import tempfile

TMP = tempfile.mkdtemp(prefix='sqlite-pages-')
G=int(os.environ.get('G','16')); N=4000
def rnd(n): return ''.join(random.choice('0123456789abcdef') for _ in range(n))
def run(merged, payload_len=1100, settle_len=1111):
    db=os.path.join(TMP, 'model.db')
    for f in [db, db+'-wal', db+'-shm']:
        if os.path.exists(f): os.remove(f)
    c=sqlite3.connect(db, isolation_level=None)
    c.execute('pragma page_size=8192'); c.execute('pragma journal_mode=wal'); c.execute('pragma wal_autocheckpoint=0'); c.execute('pragma synchronous=off')
    c.execute("""CREATE TABLE payment_states (chain_id INTEGER NOT NULL, asset TEXT NOT NULL, payer TEXT NOT NULL, nonce TEXT NOT NULL,
        state TEXT NOT NULL, resource TEXT NOT NULL, fingerprint TEXT NOT NULL, settlement TEXT, payload TEXT NOT NULL,
        requirements TEXT NOT NULL, expires_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, revision INTEGER NOT NULL,
        token_id TEXT, article_id TEXT, signed_receipt TEXT, created_at TEXT,
        PRIMARY KEY (chain_id, asset, payer, nonce))""")
    c.execute("CREATE INDEX payment_states_unresolved ON payment_states (state, updated_at)")
    c.execute("CREATE INDEX payment_states_expiry ON payment_states (expires_at)")
    c.execute("""CREATE TABLE settlements (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT, outcome TEXT, payer TEXT, pay_to TEXT, article_id TEXT,
        resource TEXT, amount_atomic TEXT, network TEXT, asset TEXT, nonce TEXT, x402_version INTEGER, tx_hash TEXT, reason TEXT, message TEXT)""")
    c.execute("CREATE INDEX settlements_outcome ON settlements (outcome, id)")
    if merged:
        c.execute("CREATE UNIQUE INDEX payment_states_token ON payment_states (token_id) WHERE token_id IS NOT NULL")
        c.execute("CREATE INDEX payment_states_article ON payment_states (article_id) WHERE article_id IS NOT NULL")
        c.execute("CREATE INDEX payment_states_payer_article ON payment_states (payer, article_id) WHERE article_id IS NOT NULL")
    else:
        c.execute("""CREATE TABLE receipts (token_id TEXT PRIMARY KEY, article_id TEXT NOT NULL, payer TEXT NOT NULL, pay_to TEXT, amount_atomic TEXT,
            network TEXT, asset TEXT, nonce TEXT, x402_version INTEGER, settlement TEXT, created_at TEXT, signed_receipt TEXT, license_id TEXT, license_version TEXT, agent TEXT)""")
        c.execute("CREATE INDEX receipts_article ON receipts (article_id)")
        c.execute("CREATE INDEX receipts_payer_article ON receipts (payer, article_id)")
    payer='0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC'
    pending=[]; t=1795498215; frames=[]
    def walsize(): return os.path.getsize(db+'-wal') if os.path.exists(db+'-wal') else 0
    for k in range(N//G):
        before=walsize()
        c.execute('begin immediate')
        for nonce in pending:
            tok=str(random.getrandbits(255))
            if merged:
                c.execute("update payment_states set state='settled', settlement=?, updated_at=?, revision=revision+1, token_id=?, article_id='c2pa-explained', signed_receipt=?, created_at='2026-11-24T05:30:00Z' where chain_id=84532 and asset='0xA' and payer=? and nonce=?", ('s'*settle_len, t+1, tok, 'r'*394, payer, nonce))
            else:
                c.execute("update payment_states set state='settled', settlement=?, updated_at=?, revision=revision+1 where chain_id=84532 and asset='0xA' and payer=? and nonce=?", ('s'*settle_len, t+1, payer, nonce))
                c.execute("insert into receipts (token_id,article_id,payer,pay_to,amount_atomic,network,asset,nonce,x402_version,settlement,created_at,signed_receipt) values (?,?,?,?,?,?,?,?,2,'verify-only','2026-11-24T05:30:00Z',?)", (tok,'c2pa-explained',payer,'0x70997970C51812dc3A010C7d01b50e0d17dc79C8','10000','eip155:84532','0x036CbD53842c5426634e7929541eC2318f3dCF7e',nonce,'r'*394))
            c.execute("insert into settlements (at,outcome,payer,pay_to,article_id,resource,amount_atomic,network,asset,nonce,x402_version,tx_hash) values ('2026-11-24T05:30:00Z','settled',?,'0xB','c2pa-explained','http://127.0.0.1:46557/x402Article?articleId=c2pa-explained','10000','eip155:84532','0x036CbD53842c5426634e7929541eC2318f3dCF7e',?,2,'verify-only')", (payer,nonce))
        new=[]
        for i in range(G):
            nonce='0x'+rnd(64)
            c.execute("insert into payment_states (chain_id,asset,payer,nonce,state,resource,fingerprint,settlement,payload,requirements,expires_at,updated_at,revision) values (84532,'0xA',?,?,'in_flight',?,?,NULL,?,?,?,?,1)", (payer,nonce,'http://127.0.0.1:46557/x402Article?articleId=c2pa-explained','0x'+rnd(64),'p'*payload_len,'q'*228,t+300,t))
            new.append(nonce)
        c.execute('commit')
        pending=new
        if k>N//G//2: frames.append((walsize()-before)/(8192+24))
    per=sum(frames)/len(frames)/G
    data=open(db+'-wal','rb').read(); off=32; pages=[]
    while off+24+8192<=len(data):
        pages.append(struct.unpack('>I',data[off:off+4])[0]); off+=24+8192
    owner={pg:name for name,pg in c.execute('select name,pageno from dbstat')}
    cnt=collections.Counter(owner.get(p,'?') for p in pages[len(pages)//2:])
    print(f"{'merged' if merged else 'current'} payload {payload_len}: {per:.2f} frames/purchase;", ', '.join(f'{k} {v/(N/2):.2f}' for k,v in cnt.most_common(6)))
random.seed(3)
for pl in (4300, 1100):
    run(False, pl); run(True, pl)
shutil.rmtree(TMP)
