"""The store protocol in one process, by concept: :mod:`.server` (the shared
state), the lease, the ledger, the runtime definitions, the runs and the
operator half.  :mod:`..in_memory` puts one candidate's store together."""
