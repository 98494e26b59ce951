"""``agency audit erase SUBJECT``: crypto-shredding of one subject's personal data.

Deletes the subject's key from the key directory (``middleware.audit.shredding``): every value
the personal-data guard sealed under it becomes unreadable, exports show ``[erased]``, and the
log is not changed, so ``agency audit verify --key`` still passes. The erasure is itself audited
(an ``audit.erased`` record in each node log, naming the key id, never the subject). Like
``audit retain`` it works on logs no gateway holds open; whoever runs it holds the key directory
and the checkpoint keys, i.e. is an admin of the deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from pathlib import Path

from ..errors import InvalidInput

__all__ = ["register"]


def register(cmds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    er = cmds.add_parser(
        "erase",
        help="erase a subject's personal data (crypto-shredding; audited)",
        description="Delete the key under which the personal-data guard sealed a subject's values "
        "(a user id, or a session id for records without a user). Every sealed value of that subject "
        "becomes unreadable for good; the log itself is not changed, so verify, proofs and checkpoints "
        "stay valid and exports show [erased]. An audit.erased record (the key id, who erased, whether a "
        "key was found) is appended to each node log, signed with the log's checkpoint key. The logs must "
        "not be open in a running gateway.",
    )
    er.add_argument("subject", help="the user id (or session id) whose personal data is erased")
    er.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="an audit directory of node logs (default: $AGENCY_DATA_DIR/audit or ./agency-data/audit)",
    )
    er.add_argument(
        "--subject-keys",
        type=Path,
        help="the subject key directory (default: keys/subjects beside the audit directory)",
    )
    er.add_argument("--by", default="", help="who asks (recorded; default: the local user name)")
    er.set_defaults(handler=_erase)


def _erase(args: argparse.Namespace) -> int:
    from ..audit.checkpoint import Signer, default_key_path
    from ..audit.record import AuditRecord
    from ..audit.shredding import ERASURE_RECORD, FileKeyStore, default_subject_key_dir, key_id
    from ..audit.verify import find_node_dirs
    from ..audit.wal import WalAuditLog
    from .audit import _default_path

    subject = args.subject.strip()
    if not subject:
        raise InvalidInput.single("subject", "required", what="audit erase")
    root = _default_path(args.path)
    dirs = find_node_dirs(root)
    if not dirs:
        raise InvalidInput.single("path", f"no node log under {root}", what="audit erase")
    signers = {}
    for d in dirs:  # every key is checked before anything is erased
        key = default_key_path(d.parent, d.name)
        if not key.is_file():
            raise InvalidInput.single("path", f"no checkpoint key at {key} for {d.name}", what="audit erase")
        signers[d] = Signer.from_skey(key.read_text())
    store = FileKeyStore(args.subject_keys or default_subject_key_dir(root))
    kid = key_id(subject)
    found = store.erase(kid)
    by = args.by or getpass.getuser()

    async def record() -> None:
        for d, signer in signers.items():
            log = WalAuditLog(d.parent, d.name, signer=signer)
            try:
                await log.append(
                    AuditRecord(
                        event_type=ERASURE_RECORD,
                        node=d.name,
                        component="cli",
                        rule="right_to_erasure",
                        outcome="erased" if found else "no_key",
                        detail={"subject_key_id": kid, "by": by, "key_found": found},
                    )
                )
            finally:
                await log.close()

    asyncio.run(record())
    what = (
        "erased" if found else "no key found (nothing was sealed for this subject, or it was erased before)"
    )
    print(f"subject key {kid}: {what}; recorded in {len(signers)} node log(s)", file=sys.stderr)
    return 0
