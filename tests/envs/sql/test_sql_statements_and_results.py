"""The SQL lexer (statement split, kind, ORDER BY) and result-set formatting and matching."""

from decimal import Decimal

from agentgym.envs.sql.results import QueryResult, TableFormat, format_table, results_match
from agentgym.envs.sql.statements import has_top_level_order_by, split_statements, statement_kind


def test_split_ignores_semicolons_in_literals_comments_and_dollar_quotes():
    assert split_statements("SELECT 'a;b' -- ; x\n") == ["SELECT 'a;b' -- ; x"]
    assert split_statements('SELECT "x;y" FROM t /* ; */;') == ['SELECT "x;y" FROM t /* ; */']
    assert split_statements("SELECT $$;$$, $tag$ ; $tag$") == ["SELECT $$;$$, $tag$ ; $tag$"]
    assert len(split_statements("SELECT 1; DROP TABLE t")) == 2
    assert split_statements(" ;; -- only a comment\n") == []


def test_statement_kind_and_top_level_order_by():
    assert statement_kind("  (SELECT 1)") == "SELECT"
    assert statement_kind("/* hi */ with x as (select 1) select * from x") == "WITH"
    assert statement_kind("'DROP'") == ""
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert not has_top_level_order_by("SELECT a, RANK() OVER (ORDER BY b) FROM t")
    assert not has_top_level_order_by("SELECT * FROM (SELECT a FROM t ORDER BY a) s")
    assert not has_top_level_order_by("SELECT 'ORDER BY' FROM t")


def test_format_table_caps_rows_cells_and_characters():
    rows = tuple((i, "x" * 500) for i in range(100))
    text = format_table(QueryResult(("id", "blob"), rows, more_rows=True), TableFormat(max_rows=5, max_cell_chars=10))
    assert text.count("\n") <= 8 and "xxxxxxxxx…" in text and "(100+ rows; showing the first 5" in text
    small = format_table(QueryResult(("n",), ((1,),)), TableFormat(max_chars=50))
    assert small.endswith("(1 row)")
    capped = format_table(QueryResult(("a",), tuple((str(i) * 30,) for i in range(50))), TableFormat(max_rows=50, max_chars=300))
    assert len(capped) < 500 and "showing the first" in capped
    assert format_table(QueryResult((), ())) .startswith("Statement ran")


def test_match_is_a_multiset_unless_ordered_and_normalises_numbers():
    gold = QueryResult(("a", "b"), ((1, "x"), (2, "y"), (2, "y")))
    assert results_match(QueryResult(("a", "b"), ((2, "y"), (1.0, "x"), (2, "y"))), gold, ordered=False).matched
    assert not results_match(QueryResult(("a", "b"), ((2, "y"), (1, "x"), (2, "y"))), gold, ordered=True).matched
    assert not results_match(QueryResult(("a", "b"), ((1, "x"), (2, "y"))), gold, ordered=False).matched
    swapped = QueryResult(("b", "a"), (("x", 1), ("y", 2), ("y", 2)))
    assert results_match(swapped, gold, ordered=False).reason == "columns in another order"
    assert results_match(QueryResult(("s",), ((Decimal("1234.5600"),),)), QueryResult(("s",), ((1234.5600000001,),)),
                         ordered=False).matched
    wrong = results_match(QueryResult(("a",), ((1,),)), gold, ordered=False)
    assert not wrong.matched and "columns" in wrong.reason
    assert not results_match(QueryResult(("a", "b"), gold.rows, more_rows=True), gold, ordered=False).matched
