#!/usr/bin/env python3
"""The official Python x402 v2 reference client (PyPI ``x402``: x402Client + httpx transport +
EVM exact and upto client schemes + an eth_account key) as a one-shot CLI.

  python pay.py --url URL [--method POST] [--body '{...}'] [--header 'k: v']... \
      [--scheme exact|upto] [--key 0x..] [--rpc-url URL] [--asset 0x..] [--max-amount N] \
      [--approve exact|max|none] [--timeout 60]
env: X402_PAYER_KEY (for --key), X402_RPC_URL (for --rpc-url)

Prints ONE JSON line: {status, headers, payment_response, body, payment_signature,
payment_payload, approve_tx, elapsed_ms}; on a client-side failure {error, ...} and exit 1.
Exit 0 whenever an HTTP answer was received, whatever its status.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time

import httpx
from eth_account import Account
from web3 import Web3

from x402 import x402Client
from x402.http import decode_payment_response_header
from x402.http.clients import x402_httpx_transport
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner, EthAccountSignerWithRPC
from x402.mechanisms.evm.upto import UptoEvmClientScheme

ERC20_ABI = [
    {
        "type": "function",
        "name": "allowance",
        "stateMutability": "view",
        "inputs": [{"name": "owner", "type": "address"}, {"name": "spender", "type": "address"}],
        "outputs": [{"name": "", "type": "uint256"}],
    },
    {
        "type": "function",
        "name": "approve",
        "stateMutability": "nonpayable",
        "inputs": [{"name": "spender", "type": "address"}, {"name": "amount", "type": "uint256"}],
        "outputs": [{"name": "", "type": "bool"}],
    },
]
MAX_UINT256 = 2**256 - 1

STARTED = time.monotonic()
OUT: dict = {
    "status": None,
    "headers": {},
    "payment_response": None,
    "body": None,
    "payment_signature": None,
    "payment_payload": None,
    "approve_tx": None,
    "elapsed_ms": None,
}


def finish(code: int, **extra) -> None:
    OUT["elapsed_ms"] = round((time.monotonic() - STARTED) * 1000)
    sys.stdout.write(json.dumps({**OUT, **extra}) + "\n")
    sys.stdout.flush()
    sys.exit(code)


class RecordingTransport(httpx.AsyncBaseTransport):
    """Inner transport that records the PAYMENT-SIGNATURE header exactly as sent."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sig = request.headers.get("payment-signature")
        if sig:
            OUT["payment_signature"] = sig
            try:
                OUT["payment_payload"] = json.loads(base64.b64decode(sig))
            except Exception:  # keep the raw header only
                pass
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--method")
    p.add_argument("--body")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--scheme", choices=["exact", "upto"])
    p.add_argument("--key", default=os.environ.get("X402_PAYER_KEY"))
    p.add_argument("--rpc-url", default=os.environ.get("X402_RPC_URL"))
    p.add_argument("--asset")
    p.add_argument("--max-amount")
    p.add_argument("--approve", choices=["exact", "max", "none"], default="exact")
    p.add_argument("--timeout", type=float, default=60.0)
    return p.parse_args()


def ensure_permit2_allowance(args, account, requirements, payment_required) -> None:
    """upto procedure (spec 4.6): approve Permit2 from the payer wallet when the allowance is short."""
    if requirements.scheme != "upto" or args.approve == "none" or int(requirements.amount) == 0:
        return
    ext = getattr(payment_required, "extensions", None) or {}
    if "eip2612GasSponsoring" in ext or "erc20ApprovalGasSponsoring" in ext:
        return
    if not args.rpc_url:
        raise RuntimeError("upto needs --rpc-url (or X402_RPC_URL) to check/approve the Permit2 allowance")
    w3 = Web3(Web3.HTTPProvider(args.rpc_url, request_kwargs={"timeout": 30}))
    token = w3.eth.contract(address=Web3.to_checksum_address(requirements.asset), abi=ERC20_ABI)
    permit2 = Web3.to_checksum_address(PERMIT2_ADDRESS)
    allowance = token.functions.allowance(account.address, permit2).call()
    if allowance >= int(requirements.amount):
        return
    amount = MAX_UINT256 if args.approve == "max" else int(requirements.amount)
    chain_id = int(str(requirements.network).split(":")[1])
    tx = token.functions.approve(permit2, amount).build_transaction(
        {
            "from": account.address,
            "nonce": w3.eth.get_transaction_count(account.address, "pending"),
            "chainId": chain_id,
        }
    )
    signed = account.sign_transaction(tx)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=60, poll_latency=0.1)
    if receipt["status"] != 1:
        raise RuntimeError(f"approve(Permit2) reverted: {tx_hash.hex()}")
    h = tx_hash.hex()
    OUT["approve_tx"] = h if h.startswith("0x") else "0x" + h


async def run(args: argparse.Namespace) -> None:
    if not args.key:
        raise RuntimeError("--key (or X402_PAYER_KEY) is required")
    account = Account.from_key(args.key)

    # With an RPC URL the signer can also read the chain (allowance, EIP-2612 nonces), which the
    # gas-sponsoring extensions need; without one it only signs.
    signer = EthAccountSignerWithRPC(account, args.rpc_url) if args.rpc_url else EthAccountSigner(account)
    client = x402Client()
    client.register("eip155:*", ExactEvmClientScheme(signer))
    client.register("eip155:*", UptoEvmClientScheme(signer))
    if args.scheme:
        client.register_policy(lambda _v, reqs: [r for r in reqs if r.scheme == args.scheme])
    # Default spend controls allow only the library's known assets, capped at $1; the local
    # token is unknown to it: allow exactly --asset (optionally capped), else any asset.
    if args.asset:
        entry = {"network": "eip155:*", "asset": Web3.to_checksum_address(args.asset)}
        if args.max_amount:
            entry["max_amount_per_payment"] = args.max_amount
        client.set_spend_controls({"allowed_assets": [entry]})
    else:
        client.set_spend_controls({"allowed_assets": True})
        if args.max_amount:
            cap = int(args.max_amount)
            client.register_policy(lambda _v, reqs: [r for r in reqs if int(r.amount) <= cap])

    async def before(ctx):
        await asyncio.to_thread(
            ensure_permit2_allowance, args, account, ctx.selected_requirements, ctx.payment_required
        )

    client.on_before_payment_creation(before)

    headers = {}
    for h in args.header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise RuntimeError(f"bad --header {h!r} (want 'name: value')")
        headers[name.strip()] = value.strip()
    if args.body is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    method = (args.method or ("POST" if args.body is not None else "GET")).upper()

    transport = x402_httpx_transport(client, RecordingTransport())
    async with httpx.AsyncClient(transport=transport, timeout=args.timeout) as http:
        resp = await http.request(
            method, args.url, headers=headers, content=args.body.encode() if args.body is not None else None
        )
        body = await resp.aread()  # the whole body, SSE included
    OUT["status"] = resp.status_code
    OUT["headers"] = {k.lower(): v for k, v in resp.headers.items()}
    OUT["body"] = body.decode("utf-8", errors="replace")
    pr = resp.headers.get("payment-response")
    if pr:
        try:
            OUT["payment_response"] = decode_payment_response_header(pr).model_dump(by_alias=True, exclude_none=True)
        except Exception as e:  # noqa: BLE001
            OUT["payment_response"] = {"undecodable": pr, "error": str(e)}


def main() -> None:
    args = parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args), timeout=args.timeout + 5))
    except Exception as e:  # noqa: BLE001
        msg = str(e) or type(e).__name__
        cause = e.__cause__
        if cause is not None and str(cause) not in msg:
            msg += f": {cause}"
        finish(1, error=msg)
    finish(0)


if __name__ == "__main__":
    main()
