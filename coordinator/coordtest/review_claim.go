package coordtest

// Tests from a review of the claim path (2026-12-03). Run adds them to the
// suite.
var claimReviewTests = []suiteTest{}
