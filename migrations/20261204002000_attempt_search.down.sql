DROP TRIGGER IF EXISTS attempt_search_forget ON payment_attempts;
DROP TRIGGER IF EXISTS attempt_search_follow ON payment_attempts;
DROP TRIGGER IF EXISTS attempt_search_copy ON payment_attempts;
DROP FUNCTION IF EXISTS attempt_search_forget();
DROP FUNCTION IF EXISTS attempt_search_follow();
DROP FUNCTION IF EXISTS attempt_search_copy();
DROP TABLE IF EXISTS attempt_search;
