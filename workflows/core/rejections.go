package core

// FailSuperseded is the failure type of a request that a later one made moot before an
// operation served it: a create or change that a delete overtook, a delete that a create
// overtook before it began; and of a garbage collection's delete that the validator refuses, a
// create or change having been accepted since the collection looked (UnlessWantedSince).
const FailSuperseded = "Superseded"

// FailRejected is the failure type of a request that an entity's validator refused: nothing
// ran and nothing was recorded. It is how a caller tells a refusal from the failure of an
// operation that ran, which a request sent again under its Update ID is answered with again.
const FailRejected = "Rejected"
