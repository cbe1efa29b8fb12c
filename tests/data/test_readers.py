"""Readers: exact contents on small files written here, each kind of bad input, and the real shared files."""
from __future__ import annotations

import gzip
import logging

import pytest

from retromae_ir.data.readers import (
    DataFormatError,
    Document,
    ReadStats,
    iter_beir_corpus,
    iter_msmarco_collection,
    load_beir_corpus,
    load_beir_queries,
    load_msmarco_queries,
    load_qrels,
    load_topics,
)


def write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_document_contents_joins_title_and_text():
    assert Document("d", "A title", "some text").contents == "A title some text"
    assert Document("d", "", "only text").contents == "only text"


def test_beir_corpus_reads_fields_and_int_ids(tmp_path):
    path = write(tmp_path / "corpus.jsonl",
                 '{"_id": "d1", "title": "T", "text": "x y", "metadata": {}}\n\n{"_id": 7, "text": "z"}\n')
    assert list(iter_beir_corpus(path)) == [Document("d1", "T", "x y"), Document("7", "", "z")]
    assert load_beir_corpus(path)["7"].contents == "z"


@pytest.mark.parametrize("content, line, message", [
    ('{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', 2, "malformed JSON"),
    ('{"_id": "a", "text": "x"}\n{"title": "t", "text": "x"}\n', 2, "missing or empty id field '_id'"),
    ('{"_id": "a", "text": "x"}\n{"_id": "", "text": "x"}\n', 2, "missing or empty id field '_id'"),
    ('{"_id": "a", "text": "x"}\n{"_id": "b"}\n', 2, "field 'text' is missing"),
    ('{"_id": "a", "text": 3}\n', 1, "field 'text' is not a string (int)"),
    ('["a", "x"]\n', 1, "expected a JSON object, got list"),
    ('{"_id": "a", "text": "x"}\n{"_id": "b\\rc", "text": "x"}\n', 2, "id 'b\\rc' holds whitespace"),
    ('{"_id": "a b", "text": "x"}\n', 1, "id 'a b' holds whitespace"),
    # came back as "d1"
    ('{"_id": "d1\\u0000", "text": "x"}\n', 1, "id 'd1\\x00' holds a control or invisible formatting character"),
    ('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n{"_id": "a", "text": "z"}\n', 3, "duplicate id 'a'"),
])
def test_beir_corpus_bad_lines_name_file_and_line(tmp_path, content, line, message):
    path = write(tmp_path / "corpus.jsonl", content)
    with pytest.raises(DataFormatError) as err:
        load_beir_corpus(path)
    assert str(err.value).startswith(f"{path}:{line}: {message}")


def test_non_utf8_bytes_name_file_and_line(tmp_path):
    path = write(tmp_path / "corpus.jsonl", b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl:2: not valid UTF-8"):
        load_beir_corpus(path)


def test_data_format_error_is_a_value_error():
    assert issubclass(DataFormatError, ValueError)


def test_duplicate_check_can_be_turned_off_for_streaming(tmp_path):
    path = write(tmp_path / "corpus.jsonl", '{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n')
    assert [d.text for d in iter_beir_corpus(path, unique=False)] == ["x", "y"]


def test_empty_texts_are_kept_counted_and_warned(tmp_path, caplog):
    path = write(tmp_path / "corpus.jsonl",
                 '{"_id": "a", "title": "", "text": ""}\n{"_id": "b", "text": "x"}\n{"_id": "c", "text": " "}\n')
    stats = ReadStats()
    with caplog.at_level(logging.WARNING, logger="retromae_ir.data.readers"):
        corpus = load_beir_corpus(path, stats)
    assert sorted(corpus) == ["a", "b", "c"]
    assert stats == ReadStats(records=3, empty=2)
    assert f"{path}: 2 of 3 records have an empty text" in caplog.text


def test_beir_queries(tmp_path):
    path = write(tmp_path / "queries.jsonl",
                 '{"_id": "1", "text": "q one", "metadata": {}}\n{"_id": "2", "text": "q2"}\n')
    assert load_beir_queries(path) == {"1": "q one", "2": "q2"}


def test_qrels_beir_tsv_with_header_and_trec_format_agree(tmp_path):
    beir = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td1\t2\n")
    trec = write(tmp_path / "qrels.txt", "q1 0 d1 1\nq1 0 d2 0\nq2 Q0 d1 2\n")
    expected = {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    assert load_qrels(beir) == expected
    assert load_qrels(trec) == expected


def test_qrels_beir_tsv_without_header(tmp_path):
    assert load_qrels(write(tmp_path / "q.tsv", "q1\td1\t1\n")) == {"q1": {"d1": 1}}


@pytest.mark.parametrize("content, line, message", [
    ("q1 0 d1 1\nq1 0 d2\n", 2, "expected TREC qrels"),
    ("q1 0 d1 1\nq1 0 d2 yes\n", 2, "relevance 'yes' is not an integer"),
    ("q1 0 d1 1\nq2 0 d1 1\nq1 0 d1 0\n", 3, "duplicate judgement for query 'q1', document 'd1'"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n", 3, "expected BEIR qrels"),
    ("q1\td1\t1\n\td2\t1\n", 2, "empty query or document id"),
    # int() read these as 10 and 3, trec_eval's atoi as 1 and 0
    ("q1 0 d1 1\nq1 0 d2 1_0\n", 2, "relevance '1_0' is not an integer"),
    ("q1 0 d1 1\nq1 0 d2 \u0663\n", 2, "relevance '\u0663' is not an integer"),
    # judged ids with a hidden character: relevant documents no run could retrieve
    ("q1\td1\t1\nq1\t\ufeffd2\t1\n", 2, "id '\\ufeffd2' holds a control or invisible formatting character"),
    ("q1 0 d1 1\nq\u200b2 0 d2 1\n", 2, "id 'q\\u200b2' holds a control or invisible formatting character"),
    ("q1 0 d1 1\nq2 0 d\x002 1\n", 2, "id 'd\\x002' holds a control or invisible formatting character"),
])
def test_qrels_bad_lines(tmp_path, content, line, message):
    path = write(tmp_path / "qrels.txt", content)
    with pytest.raises(DataFormatError) as err:
        load_qrels(path)
    assert str(err.value).startswith(f"{path}:{line}: {message}")


def test_empty_qrels_file_is_an_error(tmp_path):
    path = write(tmp_path / "qrels.txt", "\n")
    with pytest.raises(DataFormatError, match="no judgements"):
        load_qrels(path)


def test_msmarco_collection_and_queries(tmp_path):
    collection = write(tmp_path / "collection.tsv", "0\tfirst passage\r\n1\tsecond\tpassage with a tab\n")
    assert list(iter_msmarco_collection(collection)) == [Document("0", "", "first passage"),
                                                         Document("1", "", "second\tpassage with a tab")]
    queries = write(tmp_path / "queries.tsv", "5\t what is x \n6\ty\n")
    assert load_msmarco_queries(queries) == {"5": "what is x", "6": "y"}


@pytest.mark.parametrize("content, line, message", [
    ("0\tok\n1 no tab here\n", 2, "expected 'pid<TAB>passage'"),
    ("0\tok\n\tno id\n", 2, "expected 'pid<TAB>passage'"),
    ("0\tok\n0\tagain\n", 2, "duplicate id '0'"),
    ("pid\tpassage\n0\tok\n", 1, "'pid' in the id column is a header line"),
    ("\n  \npid\tpassage\n0\tok\n", 3, "'pid' in the id column is a header line"),  # after blank lines too
    ("0\tok\n7\r8\tx\n", 2, "a carriage return inside the line"),
    ("0\tok\n7\x008\tx\n", 2, "id '7\\x008' holds a control or invisible formatting character"),
    ("0\tok\n7 \tx\n", 2, "pid '7 ' has spaces around it"),
])
def test_msmarco_collection_bad_lines(tmp_path, content, line, message):
    path = write(tmp_path / "collection.tsv", content)
    with pytest.raises(DataFormatError) as err:
        list(iter_msmarco_collection(path))
    assert str(err.value).startswith(f"{path}:{line}: {message}")


def test_a_header_line_in_tsv_topics_is_an_error_not_a_query(tmp_path):
    with pytest.raises(DataFormatError, match=r"queries\.tsv:1: 'qid' in the id column is a header line"):
        load_topics(write(tmp_path / "queries.tsv", "qid\tquery\n1\tcells\n"))
    with pytest.raises(DataFormatError, match=r"queries\.tsv:2: 'qid' in the id column is a header line"):
        load_topics(write(tmp_path / "queries.tsv", "\nqid\tquery\n1\tcells\n"))
    with pytest.raises(DataFormatError, match=r"queries\.tsv:2: id '2 b' holds whitespace"):
        load_topics(write(tmp_path / "queries.tsv", "1\tcells\n2 b\tsun\n"))


def test_topics_tsv_gz(tmp_path):
    path = tmp_path / "topics.x.tsv.gz"
    path.write_bytes(gzip.compress("1\tfirst topic\n2\tsecond\n".encode()))
    assert load_topics(path) == {"1": "first topic", "2": "second"}


def test_topics_jsonl_accepts_anserini_and_beir_keys(tmp_path):
    path = write(tmp_path / "topics.jsonl", '{"qid": "1", "query": "a"}\n{"_id": "2", "text": "b"}\n'
                                            '{"id": 3, "contents": "c"}\n{"qid": "4", "title": "d"}\n')
    assert load_topics(path) == {"1": "a", "2": "b", "3": "c", "4": "d"}


def test_topics_jsonl_without_text_names_the_line(tmp_path):
    path = write(tmp_path / "topics.jsonl", '{"qid": "1", "query": "a"}\n{"qid": "2"}\n')
    with pytest.raises(DataFormatError, match=r"topics\.jsonl:2: field 'text' is missing"):
        load_topics(path)


TREC_TOPICS = {
    "robust04": ("<top>\n<num> Number: 301\n<title> International Organized Crime\n\n<desc> Description:\nIdentify\n"
                 "<narr> Narrative:\nA relevant document\n</top>\n\n"
                 "<top>\n<num> Number: 302 \n<title>\nPoliomyelitis and\n  Post-Polio\n<desc> Description:\nIs\n"
                 "</top>\n",
                 {"301": "International Organized Crime", "302": "Poliomyelitis and Post-Polio"}),
    # TREC 1-3's untagged <dom> line ran into <num>'s text ('51 <dom> Domain: ...' as the id), and a </top> at the end
    # of a text line was not seen (the topic was dropped)
    "trec-1-3, </top> ending a line": (
        "<top>\n<head> Tipster Topic Description\n<num> Number:  051\n<dom> Domain:  International Economics\n"
        "<title> Topic:  Airbus Subsidies\n<desc> Description:\nDocument will discuss\n</top>\n"
        "<top>\n<num> Number: 052\n<title> South African Sanctions </top>\n",
        {"51": "Airbus Subsidies", "52": "South African Sanctions"}),
}


@pytest.mark.parametrize("case", TREC_TOPICS)
def test_topics_trec_format(tmp_path, case):
    content, expected = TREC_TOPICS[case]
    assert load_topics(write(tmp_path / "topics.txt", content)) == expected


def test_zero_padded_trec_topic_numbers_match_their_qrels(tmp_path):
    """TREC 1-3 number topics 051-200; Anserini's reader and the qrels call them 51-200."""
    path = write(tmp_path / "topics.51-100.txt", "<top>\n<num> Number: 051\n<title> Airbus Subsidies\n</top>\n")
    assert load_topics(path) == {"51": "Airbus Subsidies"}


def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    topics = write(tmp_path / "topics.tsv", "\ufeff1\tcells\n2\tsun\n".encode("utf-8"))
    qrels = write(tmp_path / "qrels.txt", "\ufeff1 0 d1 1\n".encode("utf-8"))
    assert list(load_topics(topics)) == ["1", "2"] and list(load_qrels(qrels)) == ["1"]


@pytest.mark.parametrize("reader, content", [
    (load_topics, "1\tcells\n\ufeff2\tsun\n"),
    (load_qrels, "1 0 d1 1\n\ufeff2 0 d2 1\n"),
    (lambda path: list(iter_msmarco_collection(path)), "0\tfirst\n\ufeff1\tsecond\n"),
])
def test_a_byte_order_mark_inside_a_file_is_an_error(tmp_path, reader, content):
    """Two files saved with a mark and joined with cat: the second mark became part of an id that no qrels or run
    could match (exit 0)."""
    path = write(tmp_path / "joined.tsv", content.encode("utf-8"))
    with pytest.raises(DataFormatError, match=r"joined\.tsv:2: a byte-order mark starts this line"):
        reader(path)


def test_a_zero_width_character_in_a_corpus_id_is_an_error(tmp_path):
    path = write(tmp_path / "corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d2\u200b", "text": "b"}\n')
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl:2: id 'd2\\u200b' holds a control or invisible"):
        list(iter_beir_corpus(path))
    assert [d.docid for d in iter_beir_corpus(write(tmp_path / "ok.jsonl", '{"_id": "caf\u00e9", "text": "a"}\n'))] \
        == ["caf\u00e9"]


@pytest.mark.parametrize("reader, content", [
    (load_topics, "q1\talpha\rq2\tbeta\r\n"),
    (lambda path: list(iter_msmarco_collection(path)), "1\ta\n2\tb\r3\tc\n"),
])
def test_a_carriage_return_inside_a_line_is_an_error(tmp_path, reader, content):
    """Python's text mode and Anserini end a line at a lone carriage return: query q2 was read into q1's text, and
    passage 3 into passage 2."""
    path = write(tmp_path / "old-mac.tsv", content)
    with pytest.raises(DataFormatError, match=r"old-mac\.tsv:\d: a carriage return inside the line, and a tab"):
        reader(path)
    assert load_topics(write(tmp_path / "crlf.tsv", "q1\talpha\r\nq2\tbeta\r\n")) == {"q1": "alpha", "q2": "beta"}
    # one inside a text, no record after it: read as the text's (a tokenizer's whitespace), not refused
    assert [d.contents for d in iter_msmarco_collection(write(tmp_path / "text.tsv", "1\ta\rb\n"))] == ["a\rb"]


def test_a_trec_topic_left_open_at_the_end_is_an_error_not_a_topic_fewer(tmp_path):
    path = write(tmp_path / "topics.txt", "<top>\n<num> Number: 1\n<title> a\n</top>\n<top>\n<num> Number: 2\n"
                                          "<title> cut off here")
    with pytest.raises(DataFormatError, match=r"topics\.txt:5: TREC topic opened here is not closed"):
        load_topics(path)


@pytest.mark.parametrize("content, message", [
    # topic 1 was dropped when topic 2 opened (exit 0, a topic fewer)
    ("<top>\n<num> Number: 1\n<title> a\n<top>\n<num> Number: 2\n<title> b\n</top>\n",
     r"topics\.txt:1: TREC topic opened here is not closed by </top> before the next <top> \(line 4\)"),
    # topic 2 took topic 1's title
    ("<top>\n<num> Number: 1\n<title> a\n</top>\n<num> Number: 2\n</top>\n",
     r"topics\.txt:5: <num> outside a TREC topic"),
])
def test_a_trec_topic_opened_twice_or_a_field_outside_one_is_an_error(tmp_path, content, message):
    with pytest.raises(DataFormatError, match=message):
        load_topics(write(tmp_path / "topics.txt", content))


def test_a_title_closed_on_its_next_line_loses_the_tag(tmp_path):
    path = write(tmp_path / "topics.txt", "<top>\n<num> Number: 7\n<title> long title\ncontinued here</title>\n"
                                          "</top>\n")
    assert load_topics(path) == {"7": "long title continued here"}


def test_topics_trec_without_title_names_the_topic_line(tmp_path):
    path = write(tmp_path / "topics.txt", "<top>\n<num> Number: 1\n<title> a\n</top>\n<top>\n<num> Number: 2\n</top>\n")
    with pytest.raises(DataFormatError, match=r"topics\.txt:5: TREC topic without <num> or <title>"):
        load_topics(path)


def test_a_tsv_of_more_than_two_columns_is_not_read_as_a_collection(tmp_path):
    """DPR's psgs_w100.tsv (id, text, title, with a header): its header became document 'id', titles ran into the
    passages' text."""
    from retromae_ir.data.readers import iter_corpus

    path = write(tmp_path / "psgs_w100.tsv", 'id\ttext\ttitle\n1\t"Aaron is a prophet"\tAaron\n')
    with pytest.raises(DataFormatError, match=r"psgs_w100\.tsv:1: 3 tab-separated columns .* has 2"):
        list(iter_corpus(path))


def test_topics_duplicate_qid(tmp_path):
    path = write(tmp_path / "topics.tsv", "1\ta\n2\tb\n1\tc\n")
    with pytest.raises(DataFormatError, match=r"topics\.tsv:3: duplicate id '1'"):
        load_topics(path)


# --- the real files in ../shared/data -----------------------------------------------------------------------

def test_real_scifact(shared_data):
    folder = shared_data / "beir" / "scifact"
    stats = ReadStats()
    corpus = load_beir_corpus(folder / "corpus.jsonl", stats)
    assert len(corpus) == 5183 and stats == ReadStats(5183, 0)
    assert corpus["4983"].title.startswith("Microstructural development of human newborn cerebral white matter")
    queries = load_beir_queries(folder / "queries.jsonl")
    assert len(queries) == 1109 and queries["0"] == "0-dimensional biomaterials lack inductive properties."
    qrels = load_qrels(folder / "qrels" / "test.tsv")
    assert len(qrels) == 300 and sum(map(len, qrels.values())) == 339 and qrels["1"] == {"31715818": 1}
    assert load_qrels(shared_data / "topics-and-qrels" / "qrels.beir-v1.0.0-scifact.test.txt") == qrels


@pytest.mark.parametrize("name, count, qid, text", [
    ("topics.dl19-passage.txt", 43, "156493", "do goldfish grow"),
    ("topics.dl20.txt", 200, "1030303", "who is aziz hashim"),  # CRLF line endings
    ("topics.msmarco-passage.dev-subset.txt", 6980, "2", "Androgen receptor define"),  # leading space stripped
    ("topics.beir-v1.0.0-scifact.test.tsv.gz", 300, "1", "0-dimensional biomaterials show inductive properties."),
    ("topics.beir-v1.0.0-robust04.test.tsv.gz", 249, "350",
     "Is it hazardous to the health of individuals to\twork with computer terminals on a daily basis?"),
])
def test_real_topic_files(shared_data, name, count, qid, text):
    topics = load_topics(shared_data / "topics-and-qrels" / name)
    assert len(topics) == count and topics[qid] == text


def test_real_dl19_qrels_are_graded(shared_data):
    qrels = load_qrels(shared_data / "topics-and-qrels" / "qrels.dl19-passage.txt")
    assert len(qrels) == 43 and sum(map(len, qrels.values())) == 9260
    assert {rel for judged in qrels.values() for rel in judged.values()} == {0, 1, 2, 3}


def test_iter_corpus_picks_the_reader_by_file_name(tmp_path):
    from retromae_ir.data.readers import DataFormatError, iter_corpus

    tsv = tmp_path / "collection.tsv"
    tsv.write_text("7\tseven\n8\teight\n")
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"_id": "a", "title": "T", "text": "body"}\n')
    assert [(d.docid, d.contents) for d in iter_corpus(tsv)] == [("7", "seven"), ("8", "eight")]
    assert [(d.docid, d.contents) for d in iter_corpus(jsonl)] == [("a", "T body")]
    with pytest.raises(DataFormatError, match=r"corpus.csv: unknown corpus format"):
        iter_corpus(tmp_path / "corpus.csv")
