"""The ops of a transaction (kazoo's ``client.transaction()``), as plain data, shared
by the asyncio and the sync transaction; the conversion of a Multi's answer or
failure into kazoo's list of results; and the checks of kazoo's arguments that both
clients' calls share (``acl``, flags, data). No IO here."""

from __future__ import annotations

from typing import Any, Sequence, Union

from ._proto import tree_pb2
from .errors import BadArgumentsError, ConcordError, ErrorCode, InvalidACLError, Origin, RolledBackError
from .types import ACL, OPEN_ACL, Stat

#: What ``commit()`` returns per op: the created path, the new Stat, True (delete,
#: check), or, when the transaction failed, the failing op's exception and
#: RolledBackError for every other op.
OpResult = Union[str, Stat, bool, ConcordError]


def bad_argument(message: str) -> BadArgumentsError:
    """BAD_ARGUMENTS raised by the SDK before anything is sent."""
    return BadArgumentsError(ErrorCode.BAD_ARGUMENTS, message, origin=Origin.CLIENT)


def check_acl(acl: Any) -> None:
    """kazoo's ``acl`` argument: None, or ``OPEN_ACL_UNSAFE`` (one or more entries, each
    every permission to ``world:anyone``), the ACL every node has here, as Concord's
    ZooKeeper port accepts it; anything else is InvalidACLError (docs/python.md,
    "Porting from kazoo")."""
    if acl is None or is_open_acl(acl):
        return
    raise InvalidACLError(
        ErrorCode.BAD_ARGUMENTS,
        f"acl={acl!r}: Concord has no per-node ACLs; access is the server's grants to "
        "identities and teams, inherited down subtrees (docs/security.md). Pass acl=None "
        "or OPEN_ACL_UNSAFE, the ACL every node has (a kazoo-style positional call: "
        "create(path, value, acl, ephemeral, sequence))",
        origin=Origin.CLIENT,
    )


def is_open_acl(acl: Any) -> bool:
    """True for a list or tuple of ACL entries, at least one, each ``OPEN_ACL`` (a
    kazoo ``ACL`` compares equal to it)."""
    if not isinstance(acl, (list, tuple)) or isinstance(acl, ACL) or not acl:
        return False
    return all(isinstance(entry, tuple) and entry == OPEN_ACL for entry in acl)


def flag(name: str, value: Any) -> bool:
    """A bool argument, checked as kazoo does (a value of another type is refused)."""
    if not isinstance(value, bool):
        raise bad_argument(f"{name}={value!r}: a bool is expected")
    return value


def data(value: Any) -> bytes:
    """A node's data: bytes (or a bytes-like object), never str or an int."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise bad_argument(f"value of type {type(value).__name__}: bytes are expected")
    return bytes(value)


def create_mode(ephemeral: bool, sequence: bool) -> tree_pb2.CreateMode:
    """The wire's CreateMode for kazoo's two flags."""
    if ephemeral:
        return tree_pb2.EPHEMERAL_SEQUENTIAL if sequence else tree_pb2.EPHEMERAL
    return tree_pb2.PERSISTENT_SEQUENTIAL if sequence else tree_pb2.PERSISTENT


class TransactionOps:
    """Collects ops in order; a subclass adds ``commit()``."""

    def __init__(self) -> None:
        self._ops: list[tree_pb2.Op] = []
        #: True when an op creates an ephemeral: the Multi then names the session.
        self._ephemeral = False
        self._committed = False

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Sequence[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> None:
        """Adds a create, in kazoo's order (``acl``: None or ``OPEN_ACL_UNSAFE``)."""
        self._check_open()
        check_acl(acl)
        mode = create_mode(flag("ephemeral", ephemeral), flag("sequence", sequence))
        op = tree_pb2.CreateOp(path=path, data=data(value), mode=mode)
        self._ephemeral = self._ephemeral or ephemeral
        self._ops.append(tree_pb2.Op(create=op))

    def delete(self, path: str, version: int = -1) -> None:
        """Adds a delete of ``path`` at ``version`` (-1: any)."""
        self._check_open()
        self._ops.append(tree_pb2.Op(delete=tree_pb2.DeleteOp(path=path, version=version)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        """Adds a set of ``path``'s data at ``version`` (-1: any)."""
        self._check_open()
        op = tree_pb2.SetOp(path=path, data=data(value), version=version)
        self._ops.append(tree_pb2.Op(set=op))

    def check(self, path: str, version: int) -> None:
        """Adds a check that ``path`` exists at ``version`` (-1: any)."""
        self._check_open()
        self._ops.append(tree_pb2.Op(check=tree_pb2.CheckOp(path=path, version=version)))

    def _check_open(self) -> None:
        if self._committed:
            raise ValueError("the transaction was committed already")

    def _take(self) -> tuple[list[tree_pb2.Op], bool]:
        """The ops to send, once."""
        self._check_open()
        self._committed = True
        return self._ops, self._ephemeral


def results_of(response: Any) -> list[OpResult]:
    """kazoo's results of a successful Multi."""
    out: list[OpResult] = []
    for r in response.results:
        kind = r.WhichOneof("result")
        if kind == "create":
            out.append(r.create.path)
        elif kind == "set":
            out.append(Stat.of(r.set.stat))
        else:
            out.append(True)
    return out


def results_of_failure(err: ConcordError, count: int) -> list[OpResult] | None:
    """kazoo's results of a failed Multi, when the error names its op; else None."""
    index = err.op_index
    if index is None or not 0 <= index < count:
        return None
    rolled = [RolledBackError(ErrorCode.BAD_STATE, "rolled back") for _ in range(count)]
    out: list[OpResult] = list(rolled)
    out[index] = err
    return out
