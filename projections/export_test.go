package projections

// MaxTransferBatch is maxTransferBatch, for the tests of the package's users.
const MaxTransferBatch = maxTransferBatch
