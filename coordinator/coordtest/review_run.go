package coordtest

// Tests from a review of runs' outcome writes and group commit
// (2026-12-03). Run adds them to the suite.
var runReviewTests = []suiteTest{}
