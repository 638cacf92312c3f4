-- Add one process's counts of one minute to that minute's contention history (a hash), with at
-- most ARGV[1] templates in it: the counts of a template past the cap go to ARGV[3] ("(other)").
-- KEYS[1] = the minute's hash; ARGV = cap, expiry ms, the "other" template, then per template:
-- the template, its number of counts N, then N pairs (field, increment).
-- Fields: "t|<template>" marks a template of the minute, "#templates" counts them, and
-- "<field>|<template>" holds the counts ("a" acquisitions, "c" contentions, "l" losses, "w:<i>"
-- and "h:<i>" the wait and hold histograms' log-spaced buckets).  The hash expires ARGV[2] ms after its last write.
local key = KEYS[1]
local cap = tonumber(ARGV[1])
local other = ARGV[3]
local i = 4
while i <= #ARGV do
  local template = ARGV[i]
  local count = tonumber(ARGV[i + 1])
  i = i + 2
  if redis.call('HEXISTS', key, 't|' .. template) == 0 then
    if template ~= other and tonumber(redis.call('HGET', key, '#templates') or '0') >= cap then
      template = other
    end
    if redis.call('HSETNX', key, 't|' .. template, 1) == 1 and template ~= other then
      redis.call('HINCRBY', key, '#templates', 1)
    end
  end
  for j = 0, count - 1 do
    redis.call('HINCRBY', key, ARGV[i + 2 * j] .. '|' .. template, ARGV[i + 2 * j + 1])
  end
  i = i + 2 * count
end
redis.call('PEXPIRE', key, ARGV[2])
return 1
